package h1server

import (
	"bytes"
	"net/http"
	"net/textproto"
	"net/url"
	"strconv"
	"strings"

	"golang.org/x/net/http/httpguts"
)

// verdict is what parseHead made of the bytes at the start of a connection's
// buffer.
type verdict int

const (
	incomplete verdict = iota // no blank line yet: read more
	accepted                  // a request of the subset: served here
	handOff                   // anything else: net/http.Server reads it
)

// maxHeaders bounds the header lines of a request served here; a request
// with more is handed off (net/http.Server allows far more).
const maxHeaders = 64

// head is a request head of the subset, parsed.
type head struct {
	method, target string
	url            *url.URL
	host           string
	header         http.Header
	contentLength  int64
	close          bool // Connection: close
}

// parseHead parses the request head at the start of b. It returns the head,
// its length in bytes (including the blank line) and the verdict.
//
// The subset (docs/performance.md#the-app-side-server) is written so that
// every request it accepts is one net/http.Server accepts and reads the same
// way; everything else — other versions, CONNECT, obs-fold, bare LF, control
// or non-ASCII bytes, Transfer-Encoding, Expect, Upgrade, Trailer, duplicate or
// signed Content-Length, a missing or odd Host, userinfo, asterisk or authority
// form, more than maxHeaders lines — is handed off, never rejected here.
func parseHead(b []byte) (h head, n int, v verdict) {
	end := bytes.Index(b, crlfcrlf)
	if bareLF(b, end) {
		return h, 0, handOff // net/http accepts LF line endings; its parser decides
	}
	if end < 0 {
		return h, 0, incomplete
	}
	n = end + len(crlfcrlf)
	s := string(b[:end+len(crlf)]) // one allocation: every name and value slices it
	line, rest, _ := strings.Cut(s, "\r\n")
	if !parseRequestLine(&h, line) {
		return h, n, handOff
	}
	if !parseFields(&h, rest) {
		return h, n, handOff
	}
	if !applyFields(&h) {
		return h, n, handOff
	}
	return h, n, accepted
}

// bareLF reports whether a '\n' without a '\r' before it occurs in the head
// (up to end, the blank line, or in all of b while that is not found).
func bareLF(b []byte, end int) bool {
	if end >= 0 {
		b = b[:end+len(crlfcrlf)]
	}
	for i := bytes.IndexByte(b, '\n'); i >= 0; {
		if i == 0 || b[i-1] != '\r' {
			return true
		}
		j := bytes.IndexByte(b[i+1:], '\n')
		if j < 0 {
			return false
		}
		i += 1 + j
	}
	return false
}

var (
	crlf     = []byte("\r\n")
	crlfcrlf = []byte("\r\n\r\n")
)

// parseRequestLine accepts "METHOD SP target SP HTTP/1.1" with a token method
// other than CONNECT and an origin-form or http(s) absolute-form target that
// url.ParseRequestURI (what net/http uses) accepts, without userinfo.
func parseRequestLine(h *head, line string) bool {
	method, rest, ok := strings.Cut(line, " ")
	if !ok || !httpguts.ValidHeaderFieldName(method) || method == http.MethodConnect {
		return false
	}
	target, proto, ok := strings.Cut(rest, " ")
	if !ok || proto != "HTTP/1.1" || target == "" {
		return false
	}
	for i := 0; i < len(target); i++ {
		if c := target[i]; c <= ' ' || c >= 0x7f {
			return false
		}
	}
	absolute := strings.HasPrefix(target, "http://") || strings.HasPrefix(target, "https://")
	if target[0] != '/' && !absolute {
		return false
	}
	u, err := url.ParseRequestURI(target)
	if err != nil || u.User != nil || u.Opaque != "" || (absolute && !validHost(u.Host)) {
		return false
	}
	h.method, h.target, h.url = method, target, u
	return true
}

// parseFields reads "name: value" lines, each ending in CRLF. Names are tokens
// followed directly by a colon; values are visible ASCII, SP and HTAB, with
// leading and trailing blanks trimmed as net/textproto does.
func parseFields(h *head, s string) bool {
	count := strings.Count(s, "\r\n")
	if count > maxHeaders {
		return false
	}
	h.header = make(http.Header, count)
	values := make([]string, count) // one backing array for the single values
	for i := 0; s != ""; i++ {
		line, rest, _ := strings.Cut(s, "\r\n")
		s = rest
		name, value, ok := strings.Cut(line, ":")
		if !ok || !httpguts.ValidHeaderFieldName(name) {
			return false // includes obs-fold: a line starting with a blank
		}
		value = strings.Trim(value, " \t")
		for j := 0; j < len(value); j++ {
			if c := value[j]; (c < ' ' && c != '\t') || c >= 0x7f {
				return false
			}
		}
		key := textproto.CanonicalMIMEHeaderKey(name)
		if vv, dup := h.header[key]; dup {
			h.header[key] = append(vv, value)
			continue
		}
		values[i] = value
		h.header[key] = values[i : i+1 : i+1]
	}
	return true
}

// applyFields interprets the fields that decide framing and routing, and
// hands off every request whose framing is not a plain, single
// Content-Length (or none).
func applyFields(h *head) bool {
	hdr := h.header
	for _, k := range [...]string{"Transfer-Encoding", "Expect", "Upgrade", "Trailer"} {
		if _, ok := hdr[k]; ok {
			return false
		}
	}
	hosts := hdr["Host"]
	if len(hosts) != 1 || !validHost(hosts[0]) {
		return false
	}
	delete(hdr, "Host")
	h.host = hosts[0]
	if h.url.Host != "" {
		h.host = h.url.Host // absolute-form: the target names the host
	}
	if cl, ok := hdr["Content-Length"]; ok {
		n, ok := parseContentLength(cl)
		if !ok {
			return false
		}
		h.contentLength = n
	}
	if conn, ok := hdr["Connection"]; ok {
		close, ok := connectionClose(conn)
		if !ok {
			return false
		}
		h.close = close
	}
	if p, ok := hdr["Pragma"]; ok && p[0] == "no-cache" { // as net/http's ReadRequest
		if _, ok := hdr["Cache-Control"]; !ok {
			hdr["Cache-Control"] = []string{"no-cache"}
		}
	}
	return true
}

// parseContentLength accepts exactly one value of 1–18 decimal digits.
func parseContentLength(vv []string) (int64, bool) {
	if len(vv) != 1 || len(vv[0]) == 0 || len(vv[0]) > 18 {
		return 0, false
	}
	for i := 0; i < len(vv[0]); i++ {
		if c := vv[0][i]; c < '0' || c > '9' {
			return 0, false
		}
	}
	n, err := strconv.ParseInt(vv[0], 10, 64)
	return n, err == nil
}

// connectionClose reads Connection values made of the tokens close,
// keep-alive and other header names (which the proxy removes as hop-by-hop);
// an empty element or a non-token hands the request off.
func connectionClose(vv []string) (close, ok bool) {
	for _, v := range vv {
		for _, tok := range strings.Split(v, ",") {
			tok = strings.Trim(tok, " \t")
			if !httpguts.ValidHeaderFieldName(tok) {
				return false, false
			}
			if strings.EqualFold(tok, "close") {
				close = true
			}
		}
	}
	return close, true
}

// validHost accepts a conservative subset of what net/http allows in a Host
// header or an absolute-form authority: letters, digits, '-', '.', '_', ':'
// and the brackets of an IPv6 literal.
func validHost(s string) bool {
	if s == "" || len(s) > 255 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' ||
			c == '-' || c == '.' || c == '_' || c == ':' || c == '[' || c == ']') {
			return false
		}
	}
	return true
}
