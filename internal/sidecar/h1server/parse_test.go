package h1server

import (
	"bufio"
	"bytes"
	"fmt"
	"net/http"
	"net/textproto"
	"reflect"
	"strings"
	"testing"

	"golang.org/x/net/http/httpguts"
)

// The parser's promise: whatever it accepts, net/http.Server accepts and
// reads the same way (method, target, URL, Host, header, Content-Length,
// Connection: close). The oracle is http.ReadRequest plus the checks
// net/http.Server adds after it (a single valid Host, valid field names and
// values).

func TestParseHeadAcceptsOnlyWhatNetHTTPReadsTheSameWay(t *testing.T) {
	for _, c := range parseCases {
		t.Run(c.name, func(t *testing.T) {
			h, n, v := parseHead([]byte(c.in))
			if v != c.want {
				t.Fatalf("verdict = %v, want %v", v, c.want)
			}
			if v != accepted {
				return
			}
			if want := strings.Index(c.in, "\r\n\r\n") + 4; n != want {
				t.Errorf("head length = %d, want %d", n, want)
			}
			if diff := compareWithNetHTTP(h, []byte(c.in)); diff != "" {
				t.Error(diff)
			}
		})
	}
}

// FuzzParseHead holds parseHead to net/http on arbitrary bytes: every
// accepted head must be read identically by net/http.Server.
func FuzzParseHead(f *testing.F) {
	for _, c := range parseCases {
		f.Add([]byte(c.in))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		h, n, v := parseHead(in)
		if v != accepted {
			return
		}
		if n <= 0 || n > len(in) || !bytes.HasSuffix(in[:n], crlfcrlf) {
			t.Fatalf("head length %d does not end at a blank line in %q", n, in)
		}
		if diff := compareWithNetHTTP(h, in); diff != "" {
			t.Fatalf("%q: %s", in, diff)
		}
	})
}

// compareWithNetHTTP returns "" if net/http.Server reads in's first request as h.
func compareWithNetHTTP(h head, in []byte) string {
	req, err := http.ReadRequest(bufio.NewReader(bytes.NewReader(in)))
	if err != nil {
		return "accepted, but http.ReadRequest fails: " + err.Error()
	}
	if problem := serverChecks(req, in); problem != "" {
		return "accepted, but net/http.Server refuses it: " + problem
	}
	delete(req.Header, "Host")
	got := []any{h.method, h.target, h.url.String(), h.host, map[string][]string(h.header), h.contentLength, h.close}
	want := []any{req.Method, req.RequestURI, req.URL.String(), req.Host, map[string][]string(req.Header), req.ContentLength, req.Close}
	if !reflect.DeepEqual(got, want) {
		return "read differently:\n got " + sprint(got) + "\nwant " + sprint(want)
	}
	return ""
}

// serverChecks are the checks net/http.Server makes after reading a request
// (ReadRequest itself drops the Host fields, so they are read again).
func serverChecks(req *http.Request, in []byte) string {
	tp := textproto.NewReader(bufio.NewReader(bytes.NewReader(in)))
	if _, err := tp.ReadLine(); err != nil {
		return err.Error()
	}
	fields, err := tp.ReadMIMEHeader()
	if err != nil {
		return err.Error()
	}
	hosts, ok := fields["Host"]
	if !ok || len(hosts) == 0 {
		return "missing required Host header"
	}
	if len(hosts) > 1 {
		return "too many Host headers"
	}
	if !httpguts.ValidHostHeader(hosts[0]) {
		return "malformed Host header"
	}
	for k, vv := range req.Header {
		if !httpguts.ValidHeaderFieldName(k) {
			return "invalid header name"
		}
		for _, v := range vv {
			if !httpguts.ValidHeaderFieldValue(v) {
				return "invalid header value"
			}
		}
	}
	if req.ProtoMajor != 1 || req.ProtoMinor != 1 {
		return "not HTTP/1.1"
	}
	return ""
}

func sprint(v []any) string { return fmt.Sprintf("%#v", v) }

// parseCases are the tricky requests: each accepted one is compared with
// net/http; each handed-off one is net/http's to answer (the server test
// checks that it does, byte for byte).
var parseCases = []struct {
	name string
	in   string
	want verdict
}{
	{"an origin-form GET is accepted", "GET /v1/items?q=1 HTTP/1.1\r\nHost: api.example\r\nAccept: */*\r\n\r\n", accepted},
	{"an absolute-form GET is accepted and routed by its target", "GET http://api.example:8080/v1 HTTP/1.1\r\nHost: other\r\nProxy-Connection: Keep-Alive\r\n\r\n", accepted},
	{"an absolute-form https target is accepted", "GET https://api.example/ HTTP/1.1\r\nHost: api.example\r\n\r\n", accepted},
	{"a POST with a Content-Length is accepted", "POST /orders HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n\r\nhello", accepted},
	{"Content-Length with leading zeros is accepted as net/http reads it", "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 005\r\n\r\nhello", accepted},
	{"Connection: close is read", "GET / HTTP/1.1\r\nHost: a\r\nConnection: Keep-Alive, CLOSE\r\n\r\n", accepted},
	{"Pragma: no-cache adds Cache-Control as net/http does", "GET / HTTP/1.1\r\nHost: a\r\nPragma: no-cache\r\n\r\n", accepted},
	{"lower-case names are canonicalised", "GET / HTTP/1.1\r\nhost: a\r\nx-request-id: 7\r\ncontent-length: 0\r\n\r\n", accepted},
	{"blanks around values are trimmed", "GET / HTTP/1.1\r\nHost:a\r\nX-A: \t v1 \t\r\nX-Empty:\r\n\r\n", accepted},
	{"repeated fields keep their order", "GET / HTTP/1.1\r\nHost: a\r\nX-A: 1\r\nX-B: 2\r\nX-A: 3\r\n\r\n", accepted},
	{"an IPv6 literal host is accepted", "GET / HTTP/1.1\r\nHost: [::1]:8080\r\n\r\n", accepted},
	{"a percent-encoded path is accepted", "GET /a%20b/%2F?x=%41 HTTP/1.1\r\nHost: a\r\n\r\n", accepted},
	{"a double-slash path stays a path", "GET //evil.example/x HTTP/1.1\r\nHost: a\r\n\r\n", accepted},
	{"a pipelined second request is left in the buffer", "GET /1 HTTP/1.1\r\nHost: a\r\n\r\nGET /2 HTTP/1.1\r\nHost: a\r\n\r\n", accepted},

	{"a head without its blank line is incomplete", "GET / HTTP/1.1\r\nHost: a\r\n", incomplete},
	{"an empty buffer is incomplete", "", incomplete},

	{"obs-fold is handed off", "GET / HTTP/1.1\r\nHost: a\r\nX-A: 1\r\n 2\r\n\r\n", handOff},
	{"duplicate Content-Length is handed off", "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 1\r\nContent-Length: 1\r\n\r\nx", handOff},
	{"Content-Length and Transfer-Encoding together are handed off", "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", handOff},
	{"chunked with extensions is handed off", "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n1;ext=1\r\nx\r\n0\r\n\r\n", handOff},
	{"a signed Content-Length is handed off", "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: +5\r\n\r\nhello", handOff},
	{"a negative Content-Length is handed off", "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: -1\r\n\r\n", handOff},
	{"an empty Content-Length is handed off", "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: \r\n\r\n", handOff},
	{"bare LF line endings are handed off", "GET / HTTP/1.1\nHost: a\n\n", handOff},
	{"a bare LF inside a CRLF head is handed off", "GET / HTTP/1.1\r\nHost: a\nX: y\r\n\r\n", handOff},
	{"a bare LF before the head is complete is handed off at once", "GET / HTTP/1.1\nHost: a\n", handOff},
	{"a bare CR inside a value is handed off", "GET / HTTP/1.1\r\nHost: a\r\nX: y\rz\r\n\r\n", handOff},
	{"Expect: 100-continue is handed off", "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 1\r\nExpect: 100-continue\r\n\r\n", handOff},
	{"HTTP/1.0 keep-alive is handed off", "GET / HTTP/1.0\r\nHost: a\r\nConnection: keep-alive\r\n\r\n", handOff},
	{"HTTP/1.2 is handed off", "GET / HTTP/1.2\r\nHost: a\r\n\r\n", handOff},
	{"absolute-form with userinfo is handed off", "GET http://user:pw@api.example/ HTTP/1.1\r\nHost: api.example\r\n\r\n", handOff},
	{"CONNECT is handed off", "CONNECT api.example:443 HTTP/1.1\r\nHost: api.example:443\r\n\r\n", handOff},
	{"the asterisk form is handed off", "OPTIONS * HTTP/1.1\r\nHost: a\r\n\r\n", handOff},
	{"an upper-case scheme is handed off", "GET HTTP://a/ HTTP/1.1\r\nHost: a\r\n\r\n", handOff},
	{"an authority-form GET is handed off", "GET a:80 HTTP/1.1\r\nHost: a\r\n\r\n", handOff},
	{"a missing Host is handed off", "GET / HTTP/1.1\r\nAccept: */*\r\n\r\n", handOff},
	{"two Host fields are handed off", "GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", handOff},
	{"a Host with a space is handed off", "GET / HTTP/1.1\r\nHost: a b\r\n\r\n", handOff},
	{"a Host with userinfo is handed off", "GET / HTTP/1.1\r\nHost: u@a\r\n\r\n", handOff},
	{"a space before the colon is handed off", "GET / HTTP/1.1\r\nHost : a\r\n\r\n", handOff},
	{"a name with a space is handed off", "GET / HTTP/1.1\r\nHost: a\r\nBad Name: x\r\n\r\n", handOff},
	{"a NUL in a value is handed off", "GET / HTTP/1.1\r\nHost: a\r\nX: a\x00b\r\n\r\n", handOff},
	{"a non-ASCII value is handed off", "GET / HTTP/1.1\r\nHost: a\r\nX: caf\xc3\xa9\r\n\r\n", handOff},
	{"a DEL in the target is handed off", "GET /\x7f HTTP/1.1\r\nHost: a\r\n\r\n", handOff},
	{"a double space in the request line is handed off", "GET  / HTTP/1.1\r\nHost: a\r\n\r\n", handOff},
	{"a leading empty line is handed off", "\r\nGET / HTTP/1.1\r\nHost: a\r\n\r\n", handOff},
	{"a method with a slash is handed off", "GE/T / HTTP/1.1\r\nHost: a\r\n\r\n", handOff},
	{"Upgrade is handed off", "GET / HTTP/1.1\r\nHost: a\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n", handOff},
	{"a request Trailer field is handed off", "GET / HTTP/1.1\r\nHost: a\r\nTrailer: X\r\n\r\n", handOff},
	{"an empty Connection element is handed off", "GET / HTTP/1.1\r\nHost: a\r\nConnection: close,,\r\n\r\n", handOff},
	{"a '#' in the target is read as net/http reads it", "GET /a#b HTTP/1.1\r\nHost: a\r\n\r\n", accepted},
	{"more than 64 fields are handed off", "GET / HTTP/1.1\r\nHost: a\r\n" + strings.Repeat("X-A: 1\r\n", 64) + "\r\n", handOff},
}
