package main_test

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// The app side is served by internal/h1server with net/http.Server behind it
// for everything outside its subset, or by net/http.Server alone with
// --http1-fast-path=false (docs/performance.md#the-app-side-server). Both
// keep the same promises; the rest of the suite runs on the default.
func TestBothAppSideServersKeepThePromises(t *testing.T) {
	for _, flag := range []string{"--http1-fast-path=true", "--http1-fast-path=false"} {
		t.Run(flag, func(t *testing.T) {
			t.Parallel()
			up := newUpstream(t, sequence(status(503), status(200)))
			s := startSidecar(t, flag, "--policy-file="+policyFile(t, up.host(), fields()...))
			assertOutcome(t, s.get(up.url("/retried")), 200, "success", "2")

			req, _ := http.NewRequest(http.MethodPost, up.url("/body"), strings.NewReader("payload"))
			req.Header.Set("Expect", "100-continue") // outside the subset: net/http.Server's
			resp, err := s.client().Do(req)
			if err != nil {
				t.Fatal(err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			got := up.got()
			if last := got[len(got)-1]; last.body != "payload" || resp.Header.Get("X-Retry-Attempts") == "" {
				t.Fatalf("upstream got body %q, response attempts %q", last.body, resp.Header.Get("X-Retry-Attempts"))
			}
		})
	}
}

func TestAnAppThatHangsUpEndsTheRetryWaitOnTheFastPath(t *testing.T) {
	up := newUpstream(t, sequence(status(503, "Retry-After", "1"), status(200)))
	s := startSidecar(t, "--policy-file="+policyFile(t, up.host(), fields()...))
	ctx, cancel := withCancel(100 * time.Millisecond)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, up.url("/"), nil)
	start := time.Now()
	if _, err := s.client().Do(req); err == nil {
		t.Fatal("request succeeded; want the client's own cancellation")
	}
	s.waitMetric(`retry_sidecar_requests_total{outcome="canceled",upstream="up"}`, 1)
	if took := time.Since(start); took > 700*time.Millisecond {
		t.Fatalf("the canceled outcome came %v after the request, want well before the 1s Retry-After", took)
	}
}
