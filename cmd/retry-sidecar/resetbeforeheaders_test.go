package main_test

import (
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
)

// ---- retryOn.resetBeforeHeaders (docs/retry-semantics.md#r4) ----

// An upstream that reads the whole request and resets the connection (RST,
// no response) on its first connection is retried only for a replayable
// request and only with retryOn.resetBeforeHeaders on.
func TestResetBeforeHeadersIsRetriedOnlyWhenReplayableAndOn(t *testing.T) {
	t.Parallel()
	tests := map[string]struct {
		fields   []string
		method   string
		status   int
		outcome  string
		attempts string
	}{
		"a GET reset after its request was read is retried by default": {
			method: "GET", status: 200, outcome: "success", attempts: "2",
		},
		"a GET reset is retried with resetBeforeHeaders: true": {
			fields: []string{"retryOn: {resetBeforeHeaders: true}"},
			method: "GET", status: 200, outcome: "success", attempts: "2",
		},
		"a GET reset is not retried with resetBeforeHeaders: false": {
			fields: []string{"retryOn: {resetBeforeHeaders: false}"},
			method: "GET", status: http.StatusBadGateway, outcome: "upstream-error", attempts: "1",
		},
		"a POST without an idempotency key is not replayable, so its reset is not retried": {
			fields: []string{"retryOn: {resetBeforeHeaders: true}"},
			method: "POST", status: http.StatusBadGateway, outcome: "not-replayable", attempts: "1",
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			up := newRawUpstream(t, func(c *rawConn) {
				for {
					if _, ok := c.next(); !ok {
						return
					}
					if c.id == 1 {
						c.Conn.(*net.TCPConn).SetLinger(0) // Close sends RST
						return
					}
					c.write(respOK("second"))
				}
			})
			s := startSidecar(t, "--policy-file="+policyFile(t, up.host(), fields(tc.fields...)...))
			req, err := http.NewRequest(tc.method, up.url("/items"), strings.NewReader("{}"))
			if err != nil {
				t.Fatal(err)
			}
			assertOutcome(t, s.do(req), tc.status, tc.outcome, tc.attempts)
			if got := len(up.got()); strconv.Itoa(got) != tc.attempts {
				t.Fatalf("upstream read %d requests; want %s", got, tc.attempts)
			}
		})
	}
}
