package main_test

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// ---- a caller gone is gone everywhere (docs/sidecar.md#what-the-app-can-rely-on) ----

// hangupUpstream answers by path: /prime/hold announces a quota exhausted for
// 10s, /prime/slot holds its concurrency slot until the test ends, /503/...
// answers 503 (with Retry-After: 4 under /503/retry-after), anything else 200.
func hangupUpstream(t *testing.T) *rawUpstream {
	release := make(chan struct{})
	defer t.Cleanup(func() { close(release) }) // before the upstream's own cleanup waits for its connections
	return newRawUpstream(t, func(c *rawConn) {
		for {
			req, ok := c.next()
			if !ok {
				return
			}
			path := req.URL.Path
			switch {
			case path == "/prime/hold":
				c.write("HTTP/1.1 200 OK\r\nRateLimit: \"default\";r=0;t=10\r\nContent-Length: 0\r\n\r\n")
			case path == "/prime/slot":
				<-release
				c.write(respOK("released"))
			case strings.HasPrefix(path, "/503/retry-after"):
				c.write("HTTP/1.1 503 Service Unavailable\r\nRetry-After: 4\r\nContent-Length: 0\r\n\r\n")
			case strings.HasPrefix(path, "/503/"):
				c.write("HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\n\r\n")
			default:
				c.write("HTTP/1.1 201 Created\r\nContent-Length: 0\r\n\r\n")
			}
		}
	})
}

// waitKind is something a request waits for before the sidecar sends it.
type waitKind struct {
	policy []string
	// prime brings the upstream into the waiting state through the sidecar;
	// its requests are the arrivals expected besides the request's own. With
	// primeAnswered the wait begins when the sidecar has read the answer
	// (else when the priming request arrived).
	prime         []string
	primeAnswered bool
	// path of the request under test; a retry wait makes its first attempt
	// arrive (then the wait is for the retry), and exists for a replayable
	// request only.
	path      string
	retryWait bool
	waitingOn string // the gauge that shows the request waiting; "" if none does
}

var waitKinds = map[string]waitKind{
	"a pacing hold": {policy: []string{"deadline: 20s", "pacing: {rateLimitHeaders: true}"},
		prime: []string{"/prime/hold"}, primeAnswered: true, path: "/items"},
	"a concurrency queue slot": {policy: []string{"deadline: 20s", "concurrency: {maxInFlight: 1, maxQueued: 4, queueTimeout: 15s}"},
		prime: []string{"/prime/slot"}, path: "/items", waitingOn: `retry_sidecar_queued_requests{upstream="up"}`},
	"a rate-limit token": {policy: []string{"deadline: 20s", "rateLimit: {requestsPerMinute: 6, burst: 1}"},
		prime: []string{"/prime/token"}, path: "/items", waitingOn: `retry_sidecar_queued_requests{upstream="up"}`},
	"a Retry-After": {policy: []string{"deadline: 20s", "retryAfter: {maxWait: 10s, spread: 1ms}"},
		path: "/503/retry-after", retryWait: true},
	"a backoff": {policy: []string{"deadline: 20s", "backoff: {base: 5s, max: 5s, jitter: None}"},
		path: "/503/backoff", retryWait: true},
}

// appBehaviour is what the app sends on its connection before it hangs up
// during the wait: request is the one waiting, method its method.
type appBehaviour struct {
	method     string
	send       func(method, target string) string
	replayable bool
}

var appBehaviours = map[string]appBehaviour{
	"a GET then hangs up": {method: "GET", replayable: true,
		send: func(_, target string) string {
			return "GET " + target + " HTTP/1.1\r\nHost: " + hostOf(target) + "\r\n\r\n"
		}},
	"a POST with its body then hangs up": {method: "POST",
		send: func(_, target string) string { return postHead(target, 2) + "{}" }},
	"a POST with half its body then hangs up": {method: "POST",
		send: func(_, target string) string { return postHead(target, 4) + "{}" }},
	"a GET and a POST pipelined behind it then hangs up": {method: "GET", replayable: true,
		send: func(_, target string) string {
			return "GET " + target + " HTTP/1.1\r\nHost: " + hostOf(target) + "\r\n\r\n" + postHead(target+"-pipelined", 2) + "{}"
		}},
}

func postHead(target string, length int) string {
	return fmt.Sprintf("POST %s HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", target, hostOf(target), length)
}

func hostOf(target string) string {
	return strings.SplitN(strings.TrimPrefix(target, "http://"), "/", 2)[0]
}

var appSideServers = map[string]string{"the fast path": "--http1-fast-path=true", "net/http": "--http1-fast-path=false"}

// Every cell (no commas in the names: they would split --policy-file's
// temporary path): the app's request waits, the app hangs up, and the upstream
// receives nothing more than what primed the wait (and, for a retry wait,
// the first attempt); the request is counted canceled. A POST is not
// replayable, so the retry waits do not apply to it.
func TestAnAppThatHangsUpDuringAWaitSendsNothingMore(t *testing.T) {
	for server, flag := range appSideServers {
		for waitName, wait := range waitKinds {
			for behaviourName, b := range appBehaviours {
				if wait.retryWait && !b.replayable {
					continue
				}
				t.Run(fmt.Sprintf("%s holds the request for %s and the app sends %s", server, waitName, behaviourName), func(t *testing.T) {
					t.Parallel()
					hangUpDuringTheWait(t, flag, wait, b)
				})
			}
		}
	}
}

func hangUpDuringTheWait(t *testing.T, flag string, wait waitKind, b appBehaviour) {
	up := hangupUpstream(t)
	s := startSidecar(t, flag, "--policy-file="+policyFile(t, up.host(), wait.policy...))
	for i, path := range wait.prime {
		primer := dialApp(t, s.proxy)
		primer.send("GET " + up.url(path) + " HTTP/1.1\r\nHost: " + up.host() + "\r\n\r\n")
		up.waitArrivals(i+1, 10*time.Second)
		if wait.primeAnswered {
			primer.response()
		}
	}
	want := append([]string(nil), wait.prime...)

	app := dialApp(t, s.proxy)
	app.send(b.send(b.method, up.url(wait.path)))
	switch {
	case wait.retryWait:
		want = append(want, wait.path) // the first attempt; the wait is for the second
		up.waitArrivals(len(want), 10*time.Second)
	case wait.waitingOn != "":
		s.waitMetric(wait.waitingOn, 1)
	default:
		time.Sleep(300 * time.Millisecond) // a request waiting for a hold shows nowhere
	}
	app.hangUp()

	s.waitMetric(`retry_sidecar_requests_total{outcome="canceled",upstream="up"}`, 1)
	var got []string
	for _, a := range up.got() {
		got = append(got, a.path)
	}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("the upstream received %q; want %q (nothing after the hang-up)", got, want)
	}
	if n := s.metric(`retry_sidecar_requests_total{outcome="success",upstream="up"}`); n > float64(len(wait.prime)) {
		t.Fatalf("%v requests counted success; want at most the %d that primed the wait", n, len(wait.prime))
	}
}

// With nothing in flight, SIGTERM ends the sidecar within 1s whatever its
// app connections hold, on every app-side listener (a request the sidecar
// answers itself, a loop, leaves a connection idle).
func TestSIGTERMExitsWithinASecondWhateverIdleConnectionsHold(t *testing.T) {
	listeners := map[string][]string{
		"the fast path":            {"--http1-fast-path=true"},
		"net/http":                 {"--http1-fast-path=false"},
		"the transparent listener": {"--transparent-listen=127.0.0.1:0"},
	}
	// Each state's bytes, for a request sent as absolute-form to the
	// listener itself (origin-form on the transparent listener): answered at
	// once when complete.
	states := map[string]struct {
		send     string
		answered bool
	}{
		"nothing sent":              {"", false},
		"idle after a request":      {"GET {self}/ HTTP/1.1\r\nHost: {host}\r\n\r\n", true},
		"a head half sent":          {"GET {self}/ HTTP/1.1\r\nHost: {host}\r\n", false},
		"a stray CRLF after a POST": {"POST {self}/ HTTP/1.1\r\nHost: {host}\r\nContent-Length: 2\r\n\r\nhi\r\n", true},
	}
	for listener, flags := range listeners {
		for state, c := range states {
			t.Run(listener+" with "+state, func(t *testing.T) {
				t.Parallel()
				s := startSidecar(t, flags...)
				addr, self := s.proxy, "http://"+s.proxy
				if listener == "the transparent listener" {
					addr, self = s.transparent, ""
				}
				app := dialApp(t, addr)
				app.send(strings.NewReplacer("{self}", self, "{host}", addr).Replace(c.send))
				if c.answered {
					app.response() // 508 (a loop), 502 on the transparent listener (no redirect)
				} else {
					time.Sleep(100 * time.Millisecond) // the sidecar reads what was sent: nothing to await
				}
				if took := s.terminate(5 * time.Second); took > time.Second {
					t.Fatalf("the sidecar exited %v after SIGTERM; want within 1s", took)
				}
				if !app.closedBySidecar(time.Second) {
					t.Fatal("the app connection is still open")
				}
			})
		}
	}
}
