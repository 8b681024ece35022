package main_test

// Black-box tests of the upstream path (docs/sidecar.md, "What the app can rely
// on"): every transmission is an attempt, pooled connections never fail a
// request a fresh one would serve, replayability comes from the policy alone, no
// bytes cross between exchanges, loops are refused, unrelayable responses become
// 502, replay memory is capped, drains and queues respect the deadline,
// X-Retry-Not-Before is never early, pass-through adds nothing, and clock skew is
// reported whenever a Date is. The misbehaving upstreams are raw TCP servers
// (rawupstream_test.go) on 127.0.0.1.

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/retrydev/retry-operator/internal/testing/polltest"
)

// keepAliveUpstream answers every request with a keep-alive 200 whose body is
// the request path. A request for /warm-* is held until warmed is closed, so
// that concurrent warm-up requests open one connection each. A warm-up
// connection idle for idleClose (if > 0) is closed, as Node and Apache do after
// 5 s and nginx after 75 s; later connections stay open, so the test does not
// depend on how fast the machine is. While drop is set, every request is read and its connection
// closed without an answer.
func keepAliveUpstream(t *testing.T, idleClose time.Duration, drop *atomic.Bool) (*rawUpstream, chan struct{}) {
	warmed := make(chan struct{})
	up := newRawUpstream(t, func(c *rawConn) {
		warmConn := false
		for {
			if idleClose > 0 && warmConn {
				_ = c.SetReadDeadline(time.Now().Add(idleClose))
			} else {
				_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
			}
			req, ok := c.next()
			if !ok {
				return
			}
			if c.n == 1 && strings.HasPrefix(req.URL.Path, "/warm-") {
				warmConn = true
			}
			if drop != nil && drop.Load() {
				return // read, then closed without an answer
			}
			if strings.HasPrefix(req.URL.Path, "/warm-") {
				select {
				case <-warmed:
				case <-time.After(10 * time.Second):
					return
				}
			}
			if !c.write(respOK(req.URL.Path)) {
				return
			}
		}
	})
	return up, warmed
}

// warmPool makes the sidecar hold n idle keep-alive connections to up: n
// concurrent GETs that the upstream answers only once all n arrived.
func warmPool(t *testing.T, s *sidecar, up *rawUpstream, warmed chan struct{}, n int) {
	t.Helper()
	var results []<-chan result
	for i := 0; i < n; i++ {
		results = append(results, s.goGet(up.url(fmt.Sprintf("/warm-%d", i))))
	}
	up.waitArrivals(n, 10*time.Second)
	close(warmed)
	for i, ch := range results {
		if r := <-ch; r.status != 200 || r.body != fmt.Sprintf("/warm-%d", i) {
			t.Fatalf("warm-up GET %d: %d %q", i, r.status, r.body)
		}
	}
	if c := up.connCount(); c != n {
		t.Fatalf("warm-up opened %d upstream connections, want %d", c, n)
	}
}

// ---- 1. pooled connections closed by the upstream ----

func TestPooledConnectionsClosedByTheUpstreamNeverCause502(t *testing.T) {
	t.Parallel()
	for _, withPolicy := range []bool{true, false} {
		name := map[bool]string{true: "with a policy", false: "pass-through"}[withPolicy]
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			const pooled = 6
			up, warmed := keepAliveUpstream(t, 100*time.Millisecond, nil)
			s := startSidecar(t, "--policy-file="+policyFile(t, policyHost(t, up.host(), withPolicy), fields()...))
			warmPool(t, s, up, warmed, pooled)
			time.Sleep(300 * time.Millisecond) // the upstream closes all of them after 100ms idle

			for i := 0; i < pooled; i++ {
				path := fmt.Sprintf("/after-%d", i)
				r := s.get(up.url(path))
				if withPolicy {
					assertOutcome(t, r, 200, "success", "1")
				} else if r.status != 200 || r.header.Get("X-Retry-Outcome") != "" {
					t.Fatalf("GET %s after the upstream closed its idle connections: %d (outcome %q), want 200 untouched", path, r.status, r.header.Get("X-Retry-Outcome"))
				}
				if r.body != path {
					t.Fatalf("GET %s: body %q, want %q", path, r.body, path)
				}
			}
			got := up.got()
			if len(got) != 2*pooled {
				t.Fatalf("upstream received %d requests, want %d (%d warm-up + %d after the idle close, each once)", len(got), 2*pooled, pooled, pooled)
			}
			want := strings.TrimSpace(strings.Repeat("1 ", 2*pooled))
			if !withPolicy {
				want = strings.TrimSpace(strings.Repeat("- ", 2*pooled))
			}
			if a := up.attemptHeaders(); a != want {
				t.Fatalf("X-Retry-Attempt values seen by the upstream %q, want %q", a, want)
			}
			if n := s.attemptsCounted("up"); withPolicy && n != 2*pooled {
				t.Fatalf("retry_sidecar_attempts_total{upstream=\"up\"} sums to %v, want %d", n, 2*pooled)
			}
		})
	}
}

// ---- 2. a request read and dropped is one attempt, counted everywhere ----

func TestRequestReadAndDroppedIsSentOnlyAsOftenAsThePolicyAllows(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name     string
		policy   []string // nil: pass-through
		status   int
		outcome  string
		attempts string
		seen     string // X-Retry-Attempt values at the upstream, after warm-up
	}{
		{name: "maxAttempts 1", policy: fields("maxAttempts: 1"),
			status: 502, outcome: "exhausted", attempts: "1", seen: "1"},
		{name: "maxAttempts 3", policy: fields("maxAttempts: 3"),
			status: 502, outcome: "exhausted", attempts: "3", seen: "1 2 3"},
		{name: "maxAttempts 3 and a zero outage budget", policy: fields("maxAttempts: 3", "budget: {retryPercent: 0, minRetriesPerSecond: 0}"),
			status: 502, outcome: "budget-exhausted", attempts: "1", seen: "1"},
		// 6 warm-up requests take 6 of the 8 start tokens; the refill is one a minute.
		{name: "rate limit with two start tokens left", policy: fields("maxAttempts: 5", "rateLimit: {requestsPerMinute: 1, burst: 8}"),
			status: 503, outcome: "shed", attempts: "2", seen: "1 2"},
		{name: "pass-through", policy: nil, status: 502, outcome: "", attempts: "", seen: "-"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var drop atomic.Bool
			up, warmed := keepAliveUpstream(t, 0, &drop)
			host := up.host()
			if tc.policy == nil {
				host = freePort(t)
			}
			s := startSidecar(t, "--policy-file="+policyFile(t, host, tc.policy...))
			const pooled = 6
			warmPool(t, s, up, warmed, pooled)
			drop.Store(true)

			r := s.get(up.url("/dropped"))
			time.Sleep(100 * time.Millisecond) // a late resend would arrive by now
			got := up.got()[pooled:]
			var seen []string
			for _, a := range got {
				v := a.header.Get("X-Retry-Attempt")
				if v == "" {
					v = "-"
				}
				seen = append(seen, v)
			}
			if strings.Join(seen, " ") != tc.seen {
				t.Errorf("upstream received %d transmissions with X-Retry-Attempt %q, want %q", len(got), strings.Join(seen, " "), tc.seen)
			}
			if tc.policy != nil {
				assertOutcome(t, r, tc.status, tc.outcome, tc.attempts)
				if n := s.attemptsCounted("up"); n != float64(pooled+len(got)) {
					t.Errorf("retry_sidecar_attempts_total{upstream=\"up\"} sums to %v, want %d (every transmission counted)", n, pooled+len(got))
				}
			} else if r.status != tc.status {
				t.Errorf("pass-through got %d, want %d", r.status, tc.status)
			}
		})
	}
}

// ---- 3. replayability comes from the policy alone ----

func TestIdempotencyHeaderNotNamedByThePolicyDoesNotMakeAPOSTReplayable(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name, header, body string
		policy             []string
		outcome, attempts  string
		seen               string
	}{
		{name: "Idempotency-Key and an empty body", header: "Idempotency-Key", policy: fields(),
			outcome: "not-replayable", attempts: "1", seen: "1"},
		{name: "X-Idempotency-Key and an empty body", header: "X-Idempotency-Key", policy: fields(),
			outcome: "not-replayable", attempts: "1", seen: "1"},
		{name: "Idempotency-Key and a body", header: "Idempotency-Key", body: `{"amount":42}`, policy: fields(),
			outcome: "not-replayable", attempts: "1", seen: "1"},
		{name: "X-Idempotency-Key when the policy names Idempotency-Key", header: "X-Idempotency-Key",
			policy: fields("idempotencyKey: {header: Idempotency-Key}"), outcome: "not-replayable", attempts: "1", seen: "1"},
		{name: "the policy's own header is replayed", header: "Idempotency-Key", body: `{"amount":42}`,
			policy: fields("idempotencyKey: {header: Idempotency-Key}", "maxAttempts: 2"), outcome: "exhausted", attempts: "2", seen: "1 2"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var drop atomic.Bool
			up, warmed := keepAliveUpstream(t, 0, &drop)
			s := startSidecar(t, "--policy-file="+policyFile(t, up.host(), tc.policy...))
			const pooled = 6
			warmPool(t, s, up, warmed, pooled)
			drop.Store(true)

			var body io.Reader
			if tc.body != "" {
				body = strings.NewReader(tc.body)
			}
			req, _ := http.NewRequest(http.MethodPost, up.url("/charges"), body)
			req.Header.Set(tc.header, "key-7f3a")
			r := s.do(req)
			time.Sleep(100 * time.Millisecond)
			got := up.got()[pooled:]
			var seen []string
			for _, a := range got {
				seen = append(seen, a.header.Get("X-Retry-Attempt"))
				if a.header.Get(tc.header) != "key-7f3a" || a.body != tc.body {
					t.Errorf("transmission carried %s %q and body %q; want the caller's own", tc.header, a.header.Get(tc.header), a.body)
				}
			}
			if strings.Join(seen, " ") != tc.seen {
				t.Errorf("the POST was transmitted %d times (X-Retry-Attempt %q), want %q", len(got), strings.Join(seen, " "), tc.seen)
			}
			assertOutcome(t, r, 502, tc.outcome, tc.attempts)
		})
	}
}

// ---- 4. no bytes cross between exchanges ----

func TestStrayBytesAfterABodylessResponseNeverReachAnotherCaller(t *testing.T) {
	t.Parallel()
	const leak = "HTTP/1.1 200 OK\r\nContent-Length: 19\r\n\r\nuser-a private data"
	cases := []struct {
		name, method, head, stray string
		later                     bool // the stray bytes follow 30ms after the head
		wantStatus                int
	}{
		{name: "204 then a response 30ms later", method: "GET", head: "HTTP/1.1 204 No Content\r\n\r\n", stray: leak, later: true, wantStatus: 204},
		{name: "204 and a response in the same write", method: "GET", head: "HTTP/1.1 204 No Content\r\n\r\n", stray: leak, wantStatus: 204},
		{name: "304 then a response 30ms later", method: "GET", head: "HTTP/1.1 304 Not Modified\r\nETag: \"v1\"\r\n\r\n", stray: leak, later: true, wantStatus: 304},
		{name: "HEAD answered with a body that is a response", method: "HEAD", head: "HTTP/1.1 200 OK\r\nContent-Length: 58\r\n\r\n", stray: leak, later: true, wantStatus: 200},
		{name: "HEAD answered with a plain body", method: "HEAD", head: "HTTP/1.1 200 OK\r\nContent-Length: 19\r\n\r\n", stray: "user-a private data", later: true, wantStatus: 200},
		{name: "100 Continue and 204 then a response", method: "GET", head: "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 204 No Content\r\n\r\n", stray: leak, later: true, wantStatus: 204},
	}
	for _, tc := range cases {
		withAndWithoutPolicy(t, tc.name, func(t *testing.T, withPolicy bool) {
			strayWritten := make(chan struct{})
			var once sync.Once
			up := newRawUpstream(t, func(c *rawConn) {
				for {
					req, ok := c.next()
					if !ok {
						return
					}
					if req.URL.Path != "/a" {
						c.write(respOK("fresh:" + req.URL.Path))
						continue
					}
					if !tc.later {
						c.write(tc.head + tc.stray)
					} else {
						c.write(tc.head)
						time.Sleep(30 * time.Millisecond)
						c.write(tc.stray)
					}
					once.Do(func() { close(strayWritten) })
				}
			})
			host := policyHost(t, up.host(), withPolicy)
			s := startSidecar(t, "--policy-file="+policyFile(t, host, fields("maxAttempts: 1")...))
			reqA, _ := http.NewRequest(tc.method, up.url("/a"), nil)
			a := s.do(reqA)
			if a.status != tc.wantStatus || a.body != "" {
				t.Fatalf("caller A got %d %q, want %d with no body", a.status, a.body, tc.wantStatus)
			}
			select {
			case <-strayWritten:
			case <-time.After(5 * time.Second):
				t.Fatal("the upstream never wrote the stray bytes")
			}
			time.Sleep(50 * time.Millisecond) // and they have arrived at the sidecar

			b := s.get(up.url("/b")) // another client connection
			if b.body != "fresh:/b" || b.status != 200 {
				t.Fatalf("caller B got %d %q, want 200 \"fresh:/b\" (its own response, never A's bytes)", b.status, b.body)
			}
			if withPolicy {
				assertOutcome(t, b, 200, "success", "1")
			}
			var paths []string
			for _, g := range up.got() {
				paths = append(paths, g.path)
			}
			if strings.Join(paths, " ") != "/a /b" {
				t.Fatalf("upstream received %q, want \"/a /b\"", paths)
			}
		})
	}
}

// ---- 5. loops ----

func TestSelfLoopIsRefusedInEverySpelling(t *testing.T) {
	t.Parallel()
	type spelling struct {
		listenHost string // the sidecar's --listen host
		target     func(port string) string
	}
	spellings := map[string]spelling{
		"127.0.0.1":                          {"127.0.0.1", func(p string) string { return "127.0.0.1:" + p }},
		"localhost":                          {"127.0.0.1", func(p string) string { return "localhost:" + p }},
		"LocalHost":                          {"127.0.0.1", func(p string) string { return "LocalHost:" + p }},
		"0.0.0.0":                            {"127.0.0.1", func(p string) string { return "0.0.0.0:" + p }},
		"[::ffff:127.0.0.1]":                 {"127.0.0.1", func(p string) string { return "[::ffff:127.0.0.1]:" + p }},
		"[::ffff:7f00:1]":                    {"127.0.0.1", func(p string) string { return "[::ffff:7f00:1]:" + p }},
		"[0:0:0:0:0:ffff:127.0.0.1]":         {"127.0.0.1", func(p string) string { return "[0:0:0:0:0:ffff:127.0.0.1]:" + p }},
		"[::1] listening on ::1":             {"::1", func(p string) string { return "[::1]:" + p }},
		"[0:0:0:0:0:0:0:1] listening on ::1": {"::1", func(p string) string { return "[0:0:0:0:0:0:0:1]:" + p }},
		"localhost listening on ::1":         {"::1", func(p string) string { return "localhost:" + p }},
	}
	for name, sp := range spellings {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			l, err := net.Listen("tcp", net.JoinHostPort(sp.listenHost, "0"))
			if err != nil {
				t.Skipf("no %s here: %v", sp.listenHost, err)
			}
			addr := l.Addr().String()
			l.Close()
			if strings.HasPrefix(name, "localhost listening on ::1") {
				ips, _ := net.LookupHost("localhost")
				if !slices.Contains(ips, "::1") {
					t.Skipf("localhost does not resolve to ::1 here (%v): not a loop", ips)
				}
			}
			_, port, _ := net.SplitHostPort(addr)
			target := sp.target(port)
			// A policy for the spelling: a loop through the retrying path would
			// multiply, not just recurse.
			pol := policyFile(t, strings.ToLower(target), fields("maxAttempts: 3")...) // a policy host is lower-case
			s := startSidecar(t, "--listen="+addr, "--drain-timeout=200ms", "--policy-file="+pol)
			if s.proxy != addr {
				t.Fatalf("sidecar listens on %s, want %s", s.proxy, addr)
			}
			baseFDs := fdCount(s.pid())
			w := s.watch(baseFDs+200, 100<<10) // a loop is killed long before it hurts the machine
			defer w.end()
			forms := []struct{ name, request string }{
				{"absolute form", "GET http://" + target + "/loop HTTP/1.1\r\nHost: " + target + "\r\nConnection: close\r\n\r\n"},
				{"origin form", "GET /loop HTTP/1.1\r\nHost: " + target + "\r\nConnection: close\r\n\r\n"},
				{"CONNECT", "CONNECT " + target + " HTTP/1.1\r\nHost: " + target + "\r\n\r\n"},
			}
			for _, f := range forms {
				resp, _, err := rawExchange(s.proxy, f.request, nil, 3*time.Second)
				switch {
				case w.killed() != "":
					t.Fatalf("%s %s: %s", f.name, target, w.killed())
				case err != nil:
					t.Errorf("%s %s: %v", f.name, target, err)
				case resp.StatusCode != http.StatusLoopDetected:
					t.Errorf("%s %s: got %d, want 508 Loop Detected", f.name, target, resp.StatusCode)
				}
			}
			w.end()
			if w.killed() != "" {
				t.Fatal(w.killed())
			}
			if peakFDs, _ := w.peaks(); peakFDs > baseFDs+20 {
				t.Errorf("the sidecar opened up to %d descriptors (%d at start); a refused loop opens none", peakFDs, baseFDs)
			}
			for _, series := range []string{`retry_sidecar_passthrough_requests_total{result="ok"}`, `retry_sidecar_passthrough_requests_total{result="error"}`} {
				if v := s.metric(series); v != 0 {
					t.Errorf("%s = %v, want 0: a loop request was forwarded", series, v)
				}
			}
			if _, body := s.adminGet("/metrics"); strings.Contains(body, "retry_sidecar_attempts_total{") {
				t.Error("attempts were counted: a loop request was forwarded under the policy")
			}
		})
	}
}

// ---- 6. replay memory ----

func TestReplayBuffersAreAdmittedAgainstTheSidecarWideCap(t *testing.T) {
	t.Parallel()
	up := newReplayUpstream(t)
	s := startSidecar(t, fmt.Sprintf("--max-replay-memory=%d", replayCap), "--policy-file="+policyFile(t, up.host(),
		fields("replayableMethods: [GET, PUT]", "maxReplayBodyBytes: 16777216", "maxAttempts: 3", "deadline: 20s")...))
	before := procStatus(s.pid(), "VmRSS")

	// Six 16 MiB PUTs: none fits the 8 MiB cap, so each is streamed once (and
	// its 503 is final) or shed before it is read.
	assertStreamedOnceOrShed(t, up, putConcurrently(s, up, "big", replayBig))

	// Six 3 MiB PUTs at once: at most two replay buffers fit the cap together.
	buffered := countBufferedForReplay(t, up, putConcurrently(s, up, "mid", replayMid))
	if buffered > replayCap/replayMid {
		t.Errorf("%d of six concurrent 3 MiB PUTs were buffered for replay; the 8 MiB cap holds %d", buffered, replayCap/replayMid)
	}

	peak := procStatus(s.pid(), "VmHWM")
	limit := int64(replayCap>>10) + 40<<10
	t.Logf("RSS %d KiB before, peak %d KiB (limit %d KiB); %d of 6 mid-size PUTs buffered", before, peak, limit, buffered)
	if peak > limit {
		t.Errorf("sidecar peak RSS %d KiB; want <= %d KiB (the 8 MiB replay cap + 40 MiB)", peak, limit)
	}

	// Once the buffers are released, a body that fits is buffered and replayed.
	req, _ := http.NewRequest(http.MethodPut, up.url("/small"), io.LimitReader(zeros{}, replaySmall))
	req.ContentLength = replaySmall
	assertOutcome(t, s.do(req), 200, "success", "2")
	if got, want := up.sentTo("/small"), []replayRec{{"/small", "1", replaySmall}, {"/small", "2", replaySmall}}; !slices.Equal(got, want) {
		t.Errorf("the 1 MiB PUT reached the upstream as %+v, want %+v", got, want)
	}
}

// The sizes of TestReplayBuffersAreAdmittedAgainstTheSidecarWideCap: the
// sidecar's replay cap and the bodies of its PUTs, sent replayParallel at once.
const (
	replayCap      = 8 << 20
	replayBig      = 16 << 20 // larger than the whole cap
	replayMid      = 3 << 20  // two fit the cap together, three do not
	replaySmall    = 1 << 20
	replayParallel = 6
)

// replayRec is one request as the upstream read it: its path, its
// X-Retry-Attempt and the body bytes it carried.
type replayRec struct {
	path, attempt string
	n             int64
}

// replayUpstream records every request it reads. /big-*: always 503.
// /mid-*: the first transmissions are all held until the six arrived (so
// every replay buffer is live at once), then 503; a second transmission gets
// 200. /small: 503, then 200.
type replayUpstream struct {
	*upstream
	recsMu   sync.Mutex // guards recs and midFirst
	recs     []replayRec
	midFirst int
	midAll   chan struct{}
}

func newReplayUpstream(t *testing.T) *replayUpstream {
	u := &replayUpstream{upstream: &upstream{}, midAll: make(chan struct{})}
	u.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, _ := io.Copy(io.Discard, r.Body)
		u.recsMu.Lock()
		u.recs = append(u.recs, replayRec{r.URL.Path, r.Header.Get("X-Retry-Attempt"), n})
		seen := 0
		for _, x := range u.recs {
			if x.path == r.URL.Path {
				seen++
			}
		}
		isMid := strings.HasPrefix(r.URL.Path, "/mid-")
		if isMid && seen == 1 {
			if u.midFirst++; u.midFirst == replayParallel {
				close(u.midAll)
			}
		}
		u.recsMu.Unlock()
		switch {
		case isMid && seen == 1:
			select {
			case <-u.midAll:
			case <-time.After(10 * time.Second):
			}
			w.WriteHeader(503)
		case (isMid || r.URL.Path == "/small") && seen >= 2:
			w.WriteHeader(200)
		default:
			w.WriteHeader(503)
		}
	}))
	t.Cleanup(u.srv.Close)
	return u
}

// sentTo is every request for path the upstream read, in order.
func (u *replayUpstream) sentTo(path string) []replayRec {
	u.recsMu.Lock()
	defer u.recsMu.Unlock()
	var out []replayRec
	for _, x := range u.recs {
		if x.path == path {
			out = append(out, x)
		}
	}
	return out
}

// putConcurrently sends replayParallel PUTs of size zero bytes at once
// through s, to /prefix-0, /prefix-1, …, and returns their results by index.
func putConcurrently(s *sidecar, up *replayUpstream, prefix string, size int64) []result {
	results := make([]result, replayParallel)
	var wg sync.WaitGroup
	for i := range replayParallel {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req, _ := http.NewRequest(http.MethodPut, up.url(fmt.Sprintf("/%s-%d", prefix, i)), io.LimitReader(zeros{}, size))
			req.ContentLength = size
			r, err := s.try(req)
			if err != nil {
				r.body = err.Error()
			}
			results[i] = r
		}()
	}
	wg.Wait()
	return results
}

// assertStreamedOnceOrShed checks each of the big PUTs: shed before it
// reached the upstream, or streamed to it once, whole, its 503 final.
func assertStreamedOnceOrShed(t *testing.T, up *replayUpstream, results []result) {
	t.Helper()
	for i, r := range results {
		path := fmt.Sprintf("/big-%d", i)
		sent := up.sentTo(path)
		switch r.header.Get("X-Retry-Outcome") {
		case "shed":
			assertOutcome(t, r, 503, "shed", "0")
			if len(sent) != 0 {
				t.Errorf("PUT %s was shed but reached the upstream %d times", path, len(sent))
			}
		default:
			assertOutcome(t, r, 503, "not-replayable", "1")
			if len(sent) != 1 || sent[0].n != replayBig || sent[0].attempt != "1" {
				t.Errorf("PUT %s reached the upstream as %+v; want once, whole (%d bytes), X-Retry-Attempt 1", path, sent, replayBig)
			}
		}
	}
}

// countBufferedForReplay checks each of the mid-size PUTs (buffered and
// replayed, shed, or streamed once) and returns how many were buffered.
func countBufferedForReplay(t *testing.T, up *replayUpstream, results []result) int {
	t.Helper()
	buffered := 0
	for i, r := range results {
		path := fmt.Sprintf("/mid-%d", i)
		sent := up.sentTo(path)
		switch r.header.Get("X-Retry-Outcome") {
		case "success": // buffered and replayed
			buffered++
			assertOutcome(t, r, 200, "success", "2")
			if len(sent) != 2 || sent[0].n != replayMid || sent[1].n != replayMid || sent[1].attempt != "2" {
				t.Errorf("PUT %s reached the upstream as %+v; want twice, whole", path, sent)
			}
		case "shed":
			assertOutcome(t, r, 503, "shed", "0")
		default:
			assertOutcome(t, r, 503, "not-replayable", "1")
			if len(sent) != 1 || sent[0].n != replayMid {
				t.Errorf("PUT %s reached the upstream as %+v; want once, whole", path, sent)
			}
		}
	}
	return buffered
}

// ---- 7. the drain before a wait is bounded in time ----

func TestStalledBodyOfARetriedResponseDoesNotHoldTheRequestPastItsDeadline(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name     string
		deadline string
		within   time.Duration
	}{
		// Either the drain takes the whole 300ms deadline (504, one attempt) or
		// it is cut short and the retry succeeds; never 3s.
		{name: "deadline 300ms", deadline: "300ms", within: 1300 * time.Millisecond},
		// A drain takes at most 1s whatever the deadline.
		{name: "deadline 10s", deadline: "10s", within: 1500 * time.Millisecond},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			up := newRawUpstream(t, func(c *rawConn) {
				for {
					req, ok := c.next()
					if !ok {
						return
					}
					if req.URL.Path == "/stall" && len(c.u.got()) == 1 {
						c.write("HTTP/1.1 503 Service Unavailable\r\nRetry-After: 0\r\nContent-Length: 100000\r\n\r\n0123456789")
						_ = c.SetReadDeadline(time.Now().Add(3 * time.Second))
						_, _ = io.Copy(io.Discard, c) // stall until the sidecar closes, or 3s
						return
					}
					c.write(respOK("recovered"))
				}
			})
			s := startSidecar(t, "--policy-file="+policyFile(t, up.host(), fields("deadline: "+tc.deadline)...))
			r := s.get(up.url("/stall"))
			if r.elapsed > tc.within {
				t.Errorf("answered after %v, want within %v", r.elapsed, tc.within)
			}
			n := len(up.got())
			switch {
			case r.status == 200:
				assertOutcome(t, r, 200, "success", "2")
				if n != 2 || r.body != "recovered" {
					t.Errorf("upstream got %d requests, body %q; want 2, \"recovered\"", n, r.body)
				}
			case tc.deadline == "300ms":
				assertOutcome(t, r, 504, "deadline-exceeded", "1")
				if n != 1 {
					t.Errorf("upstream got %d requests, want 1", n)
				}
			default:
				t.Errorf("got %d %q (outcome %q), want 200 \"recovered\" after 2 attempts", r.status, r.body, r.header.Get("X-Retry-Outcome"))
			}
		})
	}
}

// TestEveryStalledAnswerEndsByTheDeadline: an upstream whose every answer is a
// 503 announcing 100000 bytes of which 10 arrive, on a connection it keeps
// open, costs the app no more than its deadline: the drain before a retry and
// the read of the answer given back both end by the deadline, the stalled
// connections are closed, and the app gets 504 deadline-exceeded
// (docs/retry-semantics.md#r9). Before, it got no answer at all until the
// upstream gave up (15 s and more).
func TestEveryStalledAnswerEndsByTheDeadline(t *testing.T) {
	t.Parallel()
	// The margin over the 1 s deadline for the answer and the closes to
	// arrive: the sidecar's own work and a loaded machine's scheduling.
	const deadline, margin = time.Second, 300 * time.Millisecond
	tests := map[string]struct {
		method       string
		bodySize     int // of the app's request
		retryAfter   string
		fields       []string
		wantAttempts string // X-Retry-Attempt of each arrival
	}{
		"a GET retried once the drain stopped short of the deadline": {
			method: "GET", wantAttempts: "1 2"},
		"a Retry-After shorter than the stall": {
			method: "GET", retryAfter: "0", wantAttempts: "1 2"},
		"a Retry-After past the deadline defers at once": {
			method: "GET", retryAfter: "5", wantAttempts: "1"},
		"a PUT of 70 kB sent by the net/http fallback client": {
			method: "PUT", bodySize: 70 << 10, wantAttempts: "1 2",
			fields: []string{"replayableMethods: [GET, PUT]", "maxReplayBodyBytes: 131072"}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			var mu sync.Mutex
			var closedAt []time.Time // when each stalled connection was closed
			up := newRawUpstream(t, func(c *rawConn) {
				if _, ok := c.next(); !ok {
					return
				}
				head := "HTTP/1.1 503 Service Unavailable\r\nContent-Length: 100000\r\n"
				if tc.retryAfter != "" {
					head += "Retry-After: " + tc.retryAfter + "\r\n"
				}
				c.write(head + "\r\n0123456789")
				_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
				_, _ = io.Copy(io.Discard, c.Conn) // the other 99990 bytes never come
				mu.Lock()
				closedAt = append(closedAt, time.Now())
				mu.Unlock()
			})
			f := fields(append([]string{"deadline: 1s"}, tc.fields...)...)
			s := startSidecar(t, "--policy-file="+policyFile(t, up.host(), f...))
			req, err := http.NewRequest(tc.method, up.url("/stall"), nil)
			if err != nil {
				t.Fatal(err)
			}
			if tc.bodySize > 0 {
				req.Body, req.ContentLength = io.NopCloser(strings.NewReader(strings.Repeat("x", tc.bodySize))), int64(tc.bodySize)
			}
			ctx, cancel := context.WithTimeout(req.Context(), 5*time.Second)
			defer cancel()
			start := time.Now()
			r, err := s.try(req.WithContext(ctx))
			if err != nil {
				t.Fatalf("no answer after %v: %v", time.Since(start), err)
			}
			n := len(strings.Fields(tc.wantAttempts))
			assertOutcome(t, r, 504, "deadline-exceeded", strconv.Itoa(n))
			if r.elapsed > deadline+margin {
				t.Errorf("answered after %v, want within %v", r.elapsed, deadline+margin)
			}
			if r.header.Get("X-Retry-Not-Before") == "" {
				t.Error("no X-Retry-Not-Before on the deadline-exceeded answer")
			}
			if got := up.attemptHeaders(); got != tc.wantAttempts {
				t.Errorf("the upstream saw attempts %q, want %q", got, tc.wantAttempts)
			}
			// Each stalled connection was closed before the answer was made.
			polltest.UntilTrue(t, margin, func() bool {
				mu.Lock()
				defer mu.Unlock()
				return len(closedAt) == n
			})
		})
	}
}

// ---- 8. X-Retry-Not-Before is never early ----

func TestNotBeforeIsRoundedUpAndSetWhenThereIsNoResponse(t *testing.T) {
	t.Parallel()
	t.Run("deferred by Retry-After received late in a second", notBeforeOfALateRetryAfterIsRoundedUp)
	t.Run("deadline-exceeded after a connect failure", notBeforeIsSetAfterAConnectFailure)
	t.Run("deadline-exceeded after a per-try timeout", notBeforeIsSetAfterAPerTryTimeout)
}

// notBeforeOf is r's X-Retry-Not-Before, which must be an HTTP date.
func notBeforeOf(t *testing.T, r result) time.Time {
	t.Helper()
	v := r.header.Get("X-Retry-Not-Before")
	nb, err := http.ParseTime(v)
	if err != nil {
		t.Fatalf("X-Retry-Not-Before %q: %v", v, err)
	}
	return nb
}

// notBeforeOfALateRetryAfterIsRoundedUp: a Retry-After: 60 received at .6 of
// a wall-clock second gives a not-before at or after the answer + 60 s.
func notBeforeOfALateRetryAfterIsRoundedUp(t *testing.T) {
	t.Parallel()
	var sent atomic.Int64
	up := newRawUpstream(t, func(c *rawConn) {
		if _, ok := c.next(); !ok {
			return
		}
		// Answer at .6 of a wall-clock second: truncating receipt+60s would
		// give a time up to 0.6s before what the server allowed.
		now := time.Now()
		frac := time.Duration(now.Nanosecond())
		wait := 600*time.Millisecond - frac
		if wait < 0 {
			wait += time.Second
		}
		time.Sleep(wait)
		sent.Store(time.Now().UnixNano())
		c.write("HTTP/1.1 503 Service Unavailable\r\nRetry-After: 60\r\nContent-Length: 0\r\n\r\n")
	})
	s := startSidecar(t, "--policy-file="+policyFile(t, up.host(),
		"backoff: {base: 10ms, max: 20ms}", "retryAfter: {maxWait: 1s, spread: 1ms}"))
	r := s.get(up.url("/"))
	received := time.Now()
	assertOutcome(t, r, 503, "deferred", "1")
	nb := notBeforeOf(t, r)
	lo := time.Unix(0, sent.Load()).Add(60 * time.Second)
	if nb.Before(lo) {
		t.Errorf("X-Retry-Not-Before %s is earlier than the server allowed (%s = answer + 60s); it must be rounded up",
			nb.UTC().Format(http.TimeFormat), lo.UTC().Format("15:04:05.000"))
	}
	if hi := received.Add(62 * time.Second); nb.After(hi) {
		t.Errorf("X-Retry-Not-Before %v, want at most %v", nb, hi)
	}
}

// notBeforeIsSetAfterAConnectFailure: a deadline that a connect failure and
// its 5 s backoff would pass gives the failure + 5 s, rounded up.
func notBeforeIsSetAfterAConnectFailure(t *testing.T) {
	t.Parallel()
	dead := freePort(t)
	s := startSidecar(t, "--policy-file="+policyFile(t, dead,
		"deadline: 1s", "backoff: {base: 5s, max: 5s, jitter: None}"))
	start := time.Now()
	r := s.get("http://" + dead + "/")
	assertOutcome(t, r, http.StatusGatewayTimeout, "deadline-exceeded", "1")
	nb := notBeforeOf(t, r)
	if lo, hi := start.Add(5*time.Second), time.Now().Add(6*time.Second); nb.Before(lo) || nb.After(hi) {
		t.Errorf("X-Retry-Not-Before %v, want in [%v, %v] (the failure + the 5s backoff, rounded up)", nb, lo, hi)
	}
}

// notBeforeIsSetAfterAPerTryTimeout: a deadline that a per-try timeout and
// its 5 s backoff would pass gives the timeout + 5 s, rounded up, at once.
func notBeforeIsSetAfterAPerTryTimeout(t *testing.T) {
	t.Parallel()
	up := newRawUpstream(t, func(c *rawConn) {
		if _, ok := c.next(); !ok {
			return
		}
		_ = c.SetReadDeadline(time.Now().Add(3 * time.Second))
		_, _ = io.Copy(io.Discard, c) // never answers
	})
	s := startSidecar(t, "--policy-file="+policyFile(t, up.host(),
		"deadline: 2s", "perTryTimeout: 200ms", "backoff: {base: 5s, max: 5s, jitter: None}"))
	start := time.Now()
	r := s.get(up.url("/"))
	assertOutcome(t, r, http.StatusGatewayTimeout, "deadline-exceeded", "1")
	if r.elapsed > time.Second {
		t.Errorf("answered after %v; the per-try timeout is 200ms and the backoff cannot fit the deadline", r.elapsed)
	}
	nb := notBeforeOf(t, r)
	if lo, hi := start.Add(5200*time.Millisecond), time.Now().Add(6*time.Second); nb.Before(lo) || nb.After(hi) {
		t.Errorf("X-Retry-Not-Before %v, want in [%v, %v] (the timeout + the 5s backoff, rounded up)", nb, lo, hi)
	}
	if n := len(up.got()); n != 1 {
		t.Errorf("upstream got %d requests, want 1", n)
	}
}

// ---- 9. admission sheds at once when the queue wait would pass the deadline ----

func TestFullConcurrencyShedsAtOnceWhenTheQueueWaitWouldPassTheDeadline(t *testing.T) {
	t.Parallel()
	hold := func(release chan struct{}) func(int, http.ResponseWriter, *http.Request) {
		return func(_ int, w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/held" {
				select {
				case <-release:
				case <-r.Context().Done():
				}
			}
			io.WriteString(w, "done "+r.URL.Path)
		}
	}

	// holdTheSlot starts an upstream that holds /held until release closes and
	// a sidecar with the policy fields (one slot), and fills the slot with /held.
	holdTheSlot := func(t *testing.T, release chan struct{}, policy ...string) (*sidecar, *upstream, <-chan result) {
		t.Helper()
		up := newUpstream(t, hold(release))
		s := startSidecar(t, "--policy-file="+policyFile(t, up.host(), fields(policy...)...))
		first := s.goGet(up.url("/held"))
		up.waitForArrivals(t, 1)
		return s, up, first
	}

	t.Run("the deadline is shorter than capacity can return", func(t *testing.T) {
		t.Parallel()
		release := make(chan struct{})
		defer close(release)
		s, up, first := holdTheSlot(t, release, "deadline: 800ms", "concurrency: {maxInFlight: 1, maxQueued: 5, queueTimeout: 5s}")
		r := s.get(up.url("/second"))
		assertOutcome(t, r, 503, "shed", "0")
		if r.elapsed > 400*time.Millisecond {
			t.Errorf("shed after %v; the queue wait cannot end before the 800ms deadline, so shed at once", r.elapsed)
		}
		if ra, err := strconv.Atoi(r.header.Get("Retry-After")); err != nil || ra < 1 {
			t.Errorf("Retry-After %q, want whole seconds >= 1", r.header.Get("Retry-After"))
		}
		if n := len(up.got()); n != 1 {
			t.Errorf("upstream got %d requests, want 1 (the shed one never leaves)", n)
		}
		<-first
	})

	t.Run("a queue wait that fits the deadline is still queued", func(t *testing.T) {
		t.Parallel()
		release := make(chan struct{})
		s, up, first := holdTheSlot(t, release, "deadline: 10s", "concurrency: {maxInFlight: 1, maxQueued: 5, queueTimeout: 3s}")
		time.AfterFunc(300*time.Millisecond, func() { close(release) })
		r := s.get(up.url("/second"))
		assertOutcome(t, r, 200, "success", "1")
		if r.body != "done /second" || r.elapsed < 200*time.Millisecond {
			t.Errorf("got %q after %v; want the queued request served once the slot was released", r.body, r.elapsed)
		}
		assertOutcome(t, <-first, 200, "success", "1")
	})
}

// ---- 10. unrelayable upstream responses ----

func TestUnrelayableUpstreamResponseGives502UpstreamError(t *testing.T) {
	t.Parallel()
	cases := []struct{ name, response string }{
		{"status 042", "HTTP/1.1 042 Odd\r\nContent-Length: 2\r\n\r\nok"},
		{"status 000", "HTTP/1.1 000 Zero\r\nContent-Length: 2\r\n\r\nok"},
		{"status 099", "HTTP/1.1 099 Low\r\nContent-Length: 2\r\n\r\nok"},
		{"status 1000", "HTTP/1.1 1000 Big\r\nContent-Length: 2\r\n\r\nok"},
		{"status not a number", "HTTP/1.1 2x0 OK\r\nContent-Length: 2\r\n\r\nok"},
		{"header line without a colon", "HTTP/1.1 200 OK\r\nno colon here\r\nContent-Length: 2\r\n\r\nok"},
		{"two different Content-Lengths", "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\nok"},
		{"not HTTP at all", "SSH-2.0-OpenSSH_9.6\r\n\r\n"},
	}
	for _, tc := range cases {
		withAndWithoutPolicy(t, tc.name, func(t *testing.T, withPolicy bool) {
			up := newRawUpstream(t, func(c *rawConn) {
				if _, ok := c.next(); ok {
					c.write(tc.response)
				}
			})
			host := policyHost(t, up.host(), withPolicy)
			s := startSidecar(t, "--policy-file="+policyFile(t, host, fields()...))
			req, _ := http.NewRequest(http.MethodGet, up.url("/odd"), nil)
			r, err := s.try(req)
			if err != nil {
				t.Fatalf("the app's connection was dropped: %v", err)
			}
			if withPolicy {
				assertOutcome(t, r, 502, "upstream-error", "1")
			} else if r.status != 502 {
				t.Fatalf("got %d %q, want 502", r.status, r.body)
			}
			if n := len(up.got()); n != 1 {
				t.Fatalf("upstream got %d requests, want 1 (a response was received: the request is not sent again)", n)
			}
		})
	}
}

// ---- §9.11: an early answer is relayed ----

func TestEarlyAnswerBeforeTheBodyIsReadIsRelayed(t *testing.T) {
	t.Parallel()
	chunked := func(n int) io.Reader {
		const piece = 32 << 10
		var rs []io.Reader
		for n > 0 {
			k := min(n, piece)
			rs = append(rs, strings.NewReader(strconv.FormatInt(int64(k), 16)+"\r\n"), io.LimitReader(zeros{}, int64(k)), strings.NewReader("\r\n"))
			n -= k
		}
		return io.MultiReader(append(rs, strings.NewReader("0\r\n\r\n"))...)
	}
	cases := []struct {
		name    string
		size    int
		chunked bool
	}{
		{name: "60 KiB body with Content-Length", size: 60 << 10},
		{name: "4 MiB body with Content-Length", size: 4 << 20},
		{name: "4 MiB chunked body", size: 4 << 20, chunked: true},
	}
	for _, tc := range cases {
		withAndWithoutPolicy(t, tc.name, func(t *testing.T, withPolicy bool) {
			up := newRawUpstream(t, func(c *rawConn) {
				if _, ok := c.nextHead(); !ok {
					return
				}
				// Answer without reading the body, then close the way Go's and
				// nginx's servers do: shut down writing, linger, close.
				c.write("HTTP/1.1 413 Content Too Large\r\nContent-Length: 9\r\nConnection: close\r\n\r\ntoo large")
				if tcp, isTCP := c.Conn.(*net.TCPConn); isTCP {
					_ = tcp.CloseWrite()
				}
				time.Sleep(500 * time.Millisecond)
			})
			host := policyHost(t, up.host(), withPolicy)
			s := startSidecar(t, "--policy-file="+policyFile(t, host, fields()...))
			head := "POST " + up.url("/upload") + " HTTP/1.1\r\nHost: " + up.host() + "\r\n"
			var body io.Reader
			if tc.chunked {
				head += "Transfer-Encoding: chunked\r\n\r\n"
				body = chunked(tc.size)
			} else {
				head += "Content-Length: " + strconv.Itoa(tc.size) + "\r\n\r\n"
				body = io.LimitReader(zeros{}, int64(tc.size))
			}
			resp, b, err := rawExchange(s.proxy, head, body, 10*time.Second)
			if err != nil {
				t.Fatalf("no response: %v", err)
			}
			if resp.StatusCode != 413 || b != "too large" {
				t.Fatalf("got %d %q (header %v), want the upstream's 413 \"too large\"", resp.StatusCode, b, resp.Header)
			}
			if withPolicy && (resp.Header.Get("X-Retry-Outcome") != "not-retryable" || resp.Header.Get("X-Retry-Attempts") != "1") {
				t.Fatalf("X-Retry-Outcome %q, X-Retry-Attempts %q; want not-retryable, 1 (header %v)", resp.Header.Get("X-Retry-Outcome"), resp.Header.Get("X-Retry-Attempts"), resp.Header)
			}
			if n := len(up.got()); n != 1 {
				t.Fatalf("upstream got %d requests, want 1", n)
			}
		})
	}
}

// ---- 11. pass-through is transparent ----

func TestPassThroughAddsNothingToTheRequest(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name       string
		method     string
		appHeaders string // as the app writes them, after Host
		body       string
		wantPath   string
		want       http.Header // everything the upstream may see besides Host
	}{
		{
			name: "GET without User-Agent and with hop-by-hop fields", method: "GET",
			appHeaders: "Accept: text/plain\r\nX-Custom: a  b\r\nConnection: keep-alive, X-Hop\r\nX-Hop: 1\r\n" +
				"Keep-Alive: timeout=5\r\nProxy-Connection: keep-alive\r\nProxy-Authorization: Basic eDp5\r\nTE: trailers\r\n",
			wantPath: "/p?q=1&r=%2F",
			want:     http.Header{"Accept": {"text/plain"}, "X-Custom": {"a  b"}},
		},
		{
			name: "POST with the app's own User-Agent", method: "POST",
			appHeaders: "User-Agent: curl/8.5.0\r\nContent-Type: application/json\r\nContent-Length: 7\r\nX-Request-Id: r-1\r\n",
			body:       `{"a":1}`, wantPath: "/submit",
			want: http.Header{"User-Agent": {"curl/8.5.0"}, "Content-Type": {"application/json"}, "Content-Length": {"7"}, "X-Request-Id": {"r-1"}},
		},
		{
			name: "GET carrying the app's own X-Retry-Attempt", method: "GET",
			appHeaders: "X-Retry-Attempt: 2\r\n",
			wantPath:   "/nested",
			want:       http.Header{"X-Retry-Attempt": {"2"}},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			up := newRawUpstream(t, func(c *rawConn) {
				for {
					if _, ok := c.next(); !ok {
						return
					}
					c.write(respOK("fine"))
				}
			})
			// A policy for another host, so the request goes through the routing.
			s := startSidecar(t, "--policy-file="+policyFile(t, freePort(t), fields()...))
			head := tc.method + " " + up.url(tc.wantPath) + " HTTP/1.1\r\nHost: " + up.host() + "\r\n" + tc.appHeaders + "\r\n"
			resp, b, err := rawExchange(s.proxy, head, strings.NewReader(tc.body), 5*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			if resp.StatusCode != 200 || b != "fine" || resp.Header.Get("X-Retry-Outcome") != "" {
				t.Fatalf("got %d %q (outcome %q), want the upstream's 200 \"fine\" untouched", resp.StatusCode, b, resp.Header.Get("X-Retry-Outcome"))
			}
			got := up.got()
			if len(got) != 1 {
				t.Fatalf("upstream got %d requests, want 1", len(got))
			}
			g := got[0]
			if g.path != tc.wantPath || g.body != tc.body || g.method != tc.method {
				t.Errorf("upstream got %s %q body %q, want %s %q body %q", g.method, g.path, g.body, tc.method, tc.wantPath, tc.body)
			}
			if !headerEqual(g.header, tc.want) {
				t.Errorf("upstream saw header %v, want exactly %v (plus Host); raw head:\n%s", g.header, tc.want, g.head)
			}
			if !strings.Contains(g.head, "\r\nHost: "+up.host()+"\r\n") {
				t.Errorf("upstream head lacks Host %s:\n%s", up.host(), g.head)
			}
		})
	}
}

func headerEqual(a, b http.Header) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if !slices.Equal(v, b[k]) {
			return false
		}
	}
	return true
}

// ---- 12. clock skew is reported whenever a Date is present ----

func TestClockSkewIsReportedWithoutRetryAfter(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name    string
		status  int
		outcome string
	}{
		{"200", 200, "success"},
		{"404", 404, "not-retryable"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			up := newUpstream(t, func(_ int, w http.ResponseWriter, _ *http.Request) {
				w.Header().Set("Date", time.Now().Add(-time.Minute).UTC().Format(http.TimeFormat))
				w.WriteHeader(tc.status)
			})
			s := startSidecar(t, "--log-level=debug", "--policy-file="+policyFile(t, up.host(), fields()...))
			assertOutcome(t, s.get(up.url("/")), tc.status, tc.outcome, "1")
			s.waitMetric(`retry_sidecar_requests_total{outcome="`+tc.outcome+`",upstream="up"}`, 1)
			if skew := s.metric(`retry_sidecar_clock_skew_seconds{upstream="up"}`); skew < 55 || skew > 65 {
				t.Errorf("retry_sidecar_clock_skew_seconds{upstream=\"up\"} = %v, want about 60 (a Date one minute behind, no Retry-After)", skew)
			}
			m := regexp.MustCompile(`"skew":"([^"]+)"`).FindStringSubmatch(s.logs.String())
			if m == nil {
				t.Fatalf("no skew field in the attempt log:\n%s", s.logs.String())
			}
			if skew, err := time.ParseDuration(m[1]); err != nil || skew < 55*time.Second || skew > 65*time.Second {
				t.Errorf("log skew %q, want about 1m", m[1])
			}
		})
	}
}
