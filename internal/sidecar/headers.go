package sidecar

import (
	"net/http"
	"slices"
	"strings"
)

// hopByHop are the connection-specific fields of RFC 9110 §7.6.1 (plus the
// de-facto Proxy-Connection and Keep-Alive), in canonical form. A proxy never
// forwards them; Connection also names further fields to drop. Trailer is kept
// on requests (it describes the message) but re-announced on responses.
var hopByHop = [...]string{
	"Connection",
	"Proxy-Connection",
	"Keep-Alive",
	"Te",
	"Transfer-Encoding",
	"Upgrade",
	"Proxy-Authorization",
	"Proxy-Authenticate",
}

// isHopByHop reports whether the canonical field name k is in hopByHop.
func isHopByHop(k string) bool { return slices.Contains(hopByHop[:], k) }

// hasHopByHop reports whether h carries any hop-by-hop field, so that the
// common request (none) is forwarded without copying its header.
func hasHopByHop(h http.Header) bool {
	for _, k := range hopByHop {
		if _, ok := h[k]; ok {
			return true
		}
	}
	return false
}

// removeHopByHop deletes the hop-by-hop fields of h and the fields its
// Connection header names, in place.
//
//	Connection: close, X-Trace-Hop     Keep-Alive: 5     X-Trace-Hop: 1    Accept: */*
//	→ Accept: */*
func removeHopByHop(h http.Header) {
	for _, v := range h["Connection"] {
		forEachToken(v, func(tok string) { delete(h, http.CanonicalHeaderKey(tok)) })
	}
	for _, k := range hopByHop {
		delete(h, k)
	}
}

// copyEndToEnd copies the end-to-end fields of src into dst, sharing the value
// slices (neither side modifies them). It allocates nothing for the usual
// "Connection: keep-alive" or "Connection: close".
func copyEndToEnd(dst, src http.Header) {
	conn := src["Connection"]
	for k, vv := range src {
		if isHopByHop(k) || k == "Trailer" || (len(conn) > 0 && namedBy(conn, k)) {
			continue
		}
		dst[k] = vv
	}
}

// namedBy reports whether a Connection header (its values) names the field k.
func namedBy(conn []string, k string) bool {
	found := false
	for _, v := range conn {
		forEachToken(v, func(tok string) {
			if strings.EqualFold(tok, k) {
				found = true
			}
		})
	}
	return found
}

// forEachToken calls f for each comma-separated, trimmed, non-empty token of v.
func forEachToken(v string, f func(string)) {
	for v != "" {
		var tok string
		tok, v, _ = strings.Cut(v, ",")
		if tok = strings.TrimSpace(tok); tok != "" {
			f(tok)
		}
	}
}
