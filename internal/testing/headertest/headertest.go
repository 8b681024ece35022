// Package headertest builds the response headers of tests.
package headertest

import "net/http"

// Of is the header of name, value pairs, each set (not added) under its
// canonical key: Of("RateLimit", `"default";r=0;t=30`, "Date", d).
func Of(kv ...string) http.Header {
	h := http.Header{}
	for i := 0; i < len(kv); i += 2 {
		h.Set(kv[i], kv[i+1])
	}
	return h
}
