package main_test

import (
	"bufio"
	"crypto/tls"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/retrydev/retry-operator/internal/testing/polltest"
)

// The app side is served by internal/sidecar/h1server with net/http.Server behind it
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

// TestAMalformedRequestBodyIsABadRequest: an app whose chunked request body
// breaks its framing after a first chunk (a chunk size past 64 bits, a bare LF
// ending a chunk line) gets 400 on either app-side server, never a 502
// (docs/sidecar.md#what-the-app-can-rely-on). An attempt that had gone
// upstream is aborted: its connection is closed without the last chunk, so the
// upstream never reads a whole request; one read into a replay buffer never
// went. Each is counted by retry_sidecar_malformed_request_bodies_total.
func TestAMalformedRequestBodyIsABadRequest(t *testing.T) {
	t.Parallel()
	for name, tc := range malformedBodyCases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			got := make(chan upstreamRead, 4)
			up := newRawUpstream(t, func(c *rawConn) {
				_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
				b, err := io.ReadAll(c.Conn)
				got <- upstreamRead{raw: string(b), closed: err == nil}
			})
			s := sendMalformedBody(t, tc, up)
			switch tc.wantAttempt {
			case "aborted":
				assertAttemptAborted(t, tc, got)
			case "unsent":
				if n := up.connCount(); n != 0 {
					t.Errorf("the upstream got %d connections, want none", n)
				}
			}
			series := `retry_sidecar_malformed_request_bodies_total{attempt="` + tc.wantAttempt + `"}`
			if v := s.metric(series); v != 1 {
				t.Errorf("%s = %v, want 1", series, v)
			}
		})
	}
}

// malformedBodyCase is a chunked request body whose framing breaks after its
// first chunk, and what became of the attempt that carried it.
type malformedBodyCase struct {
	fastPath    bool
	method      string
	badLine     string // the chunk line that breaks the framing
	noPolicy    bool   // the upstream's host has no policy: passed through
	wantAttempt string // the counter's label: aborted or unsent
}

// The chunk lines that break a body's framing: a chunk size past 64 bits, and
// a bare LF ending a chunk line.
const malformedOverflow, malformedBareLF = "ffffffffffffffffff\r\n", "5;ext=1\n"

var malformedBodyCases = map[string]malformedBodyCase{
	"a chunk size past 64 bits handed off by the fast path": {
		fastPath: true, method: "POST", badLine: malformedOverflow, wantAttempt: "aborted"},
	"a chunk size past 64 bits with the fast path off": {
		method: "POST", badLine: malformedOverflow, wantAttempt: "aborted"},
	"a bare LF in a chunk extension handed off by the fast path": {
		fastPath: true, method: "POST", badLine: malformedBareLF, wantAttempt: "aborted"},
	"a bare LF in a chunk extension with the fast path off": {
		method: "POST", badLine: malformedBareLF, wantAttempt: "aborted"},
	"a request without a policy passed through": {
		fastPath: true, method: "POST", badLine: malformedOverflow, noPolicy: true, wantAttempt: "aborted"},
	"a replayable PUT read into its replay buffer": {
		fastPath: true, method: "PUT", badLine: malformedOverflow, wantAttempt: "unsent"},
}

// upstreamRead is what a raw upstream read on one connection until it ended.
type upstreamRead struct {
	raw    string
	closed bool // the sidecar closed the connection (not our deadline)
}

// sendMalformedBody starts a sidecar in front of up (with a policy for it
// unless tc.noPolicy), sends tc's broken body through it and checks that the
// app gets 400 and its connection is closed. It returns the sidecar.
func sendMalformedBody(t *testing.T, tc malformedBodyCase, up *rawUpstream) *sidecar {
	t.Helper()
	host := up.host()
	if tc.noPolicy {
		host = freePort(t)
	}
	s := startSidecar(t, "--http1-fast-path="+strconv.FormatBool(tc.fastPath),
		"--policy-file="+policyFile(t, host, fields("replayableMethods: [GET, PUT]")...))
	a := dialApp(t, s.proxy)
	a.send(tc.method + " " + up.url("/order") + " HTTP/1.1\r\nHost: " + up.host() + "\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n")
	if tc.wantAttempt == "aborted" {
		// The attempt is under way before the framing breaks.
		polltest.UntilTrue(t, 5*time.Second, func() bool { return up.connCount() == 1 })
	}
	a.send(tc.badLine + "world\r\n0\r\n\r\n")
	resp, body := a.response()
	if resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("the app got %d %q, want 400", resp.StatusCode, body)
	}
	if !a.closedBySidecar(5 * time.Second) {
		t.Error("the app's connection stayed open after the 400")
	}
	return s
}

// assertAttemptAborted checks that the upstream's connection was closed
// after the attempt's head and part of its body, never a whole request.
func assertAttemptAborted(t *testing.T, tc malformedBodyCase, got <-chan upstreamRead) {
	t.Helper()
	var up1 upstreamRead
	select {
	case up1 = <-got:
	case <-time.After(5 * time.Second):
		t.Fatal("the upstream's connection was neither closed nor timed out")
	}
	if !up1.closed {
		t.Errorf("the upstream's connection stayed open after the 400 (read %q)", up1.raw)
	}
	// The policy's attempt carries X-Retry-Attempt; a pass-through nothing.
	if !strings.HasPrefix(up1.raw, tc.method+" /order HTTP/1.1\r\n") ||
		strings.Contains(up1.raw, "X-Retry-Attempt: 1\r\n") == tc.noPolicy {
		t.Errorf("the upstream read %q, want the attempt's head", up1.raw)
	}
	req, err := http.ReadRequest(bufio.NewReader(strings.NewReader(up1.raw)))
	if err == nil {
		_, err = io.ReadAll(req.Body)
	}
	if err == nil {
		t.Errorf("the upstream read a whole request: %q", up1.raw)
	}
}

// TestAMalformedRequestBodyResetsItsHTTP2Stream: to an upstream that speaks
// HTTP/2 (TLS origination, ALPN h2), the attempt of a request whose chunked
// body breaks its framing is reset: the upstream's handler reads the first
// chunk and then an error, never the end of the body, and the app gets 400.
func TestAMalformedRequestBodyResetsItsHTTP2Stream(t *testing.T) {
	t.Parallel()
	type read struct {
		body string
		err  error
	}
	started, reads := make(chan struct{}, 1), make(chan read, 1)
	ca := newTestCA(t, "test CA")
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		started <- struct{}{}
		b, err := io.ReadAll(r.Body)
		reads <- read{string(b), err}
	}))
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{ca.leaf(t, "upstream.test")}}
	srv.Config.Protocols = new(http.Protocols)
	srv.Config.Protocols.SetHTTP2(true)
	srv.EnableHTTP2 = true
	srv.StartTLS()
	t.Cleanup(srv.Close)
	host := srv.Listener.Addr().String()

	s := startSidecar(t, "--policy-file="+tlsPolicy(t, host, privateCA, ca))
	a := dialApp(t, s.proxy)
	a.send("POST http://" + host + "/order HTTP/1.1\r\nHost: " + host + "\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n")
	select { // the attempt is under way before the framing breaks
	case <-started:
	case <-time.After(5 * time.Second):
		t.Fatal("the attempt never reached the upstream")
	}
	a.send("ffffffffffffffffff\r\nworld\r\n0\r\n\r\n")
	if resp, body := a.response(); resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("the app got %d %q, want 400", resp.StatusCode, body)
	}
	select {
	case got := <-reads:
		if got.err == nil {
			t.Errorf("the upstream read a whole body %q; want its stream reset", got.body)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the upstream's handler never saw the stream end")
	}
	if v := s.metric(`retry_sidecar_malformed_request_bodies_total{attempt="aborted"}`); v != 1 {
		t.Errorf("malformed_request_bodies_total{attempt=aborted} = %v, want 1", v)
	}
}
