package retryotel

import (
	"net/http"
	"strings"
	"unicode/utf8"

	"github.com/retrydev/retry-operator/internal/sidecar/tracing/attrvalue"
)

// DefaultValueLimit is the length, in bytes, that every attribute value taken
// from the network (the method, the host, the Server and Via headers) is cut
// to unless the environment (OTEL_SPAN_ATTRIBUTE_VALUE_LENGTH_LIMIT, then
// OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT) or WithValueLimit sets another: a peer
// never decides how much memory a span holds
// (docs/observability.md#bounded-values).
const DefaultValueLimit = 256

// detach is Clean(s, limit) in memory of its own: s may be a slice of a
// larger string (the request line or head) that a span must not keep alive.
func detach(s string, limit int) string {
	if len(s) <= limit && utf8.ValidString(s) {
		return strings.Clone(s)
	}
	return attrvalue.Clean(s, limit) // a copy when it changed s
}

// methodOf is detach(m, limit) without allocating for the standard methods.
func methodOf(m string, limit int) string {
	switch m {
	case http.MethodGet:
		return http.MethodGet
	case http.MethodHead:
		return http.MethodHead
	case http.MethodPost:
		return http.MethodPost
	case http.MethodPut:
		return http.MethodPut
	case http.MethodPatch:
		return http.MethodPatch
	case http.MethodDelete:
		return http.MethodDelete
	case http.MethodConnect:
		return http.MethodConnect
	case http.MethodOptions:
		return http.MethodOptions
	case http.MethodTrace:
		return http.MethodTrace
	}
	return detach(m, limit)
}
