package main_test

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/retrydev/retry-operator/internal/testing/polltest"
)

// ---- cut-off bodies and timeouts by phase (docs/retry-semantics.md) ----

// cutOff answers one request with head, then the first part of a body, then
// drops the connection.
func cutOff(head, partial string) func(c *rawConn) {
	return func(c *rawConn) {
		if _, ok := c.next(); !ok {
			return
		}
		c.write(head + partial)
		time.Sleep(20 * time.Millisecond)
	}
}

func TestCutOffBodyIsNeverPassedOffAsComplete(t *testing.T) {
	t.Parallel()
	tests := map[string]struct {
		head, partial string
		policy        bool
	}{
		"chunked cut after 5 bytes without a policy":      {"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n", "5\r\nhello\r\n", false},
		"chunked cut after 5 bytes under a policy":        {"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n", "5\r\nhello\r\n", true},
		"chunked cut inside a chunk under a policy":       {"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n", "a\r\nhel", true},
		"sized cut after 5 of 100 bytes without a policy": {"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n", "hello", false},
		"sized cut after 5 of 100 bytes under a policy":   {"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n", "hello", true},
		// Read ahead before it is given back (docs/retry-semantics.md#r9).
		"a retryable answer given back cut after 5 of 100 bytes": {"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 100\r\n\r\n", "hello", true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			host := newRawUpstream(t, cutOff(tc.head, tc.partial)).host()
			var args []string
			if tc.policy {
				args = append(args, "--policy-file="+policyFile(t, host, fields("maxAttempts: 1")...))
			} else {
				args = append(args, "--policy-file="+policyFile(t, "unrelated.example", fields()...))
			}
			s := startSidecar(t, args...)
			resp, err := s.client().Get("http://" + host + "/")
			if err != nil {
				t.Fatalf("GET: %v (the head must reach the app)", err)
			}
			defer resp.Body.Close()
			b, err := io.ReadAll(resp.Body)
			if err == nil {
				t.Fatalf("the app read a complete %d-byte body %q; want a read error", len(b), b)
			}
			if want, _ := strconv.Atoi(tc.head[9:12]); resp.StatusCode != want {
				t.Fatalf("status %d, want the upstream's %d", resp.StatusCode, want)
			}
			if got := resp.Header.Get("X-Retry-Outcome"); (got != "") != tc.policy {
				t.Errorf("X-Retry-Outcome %q with a policy %v", got, tc.policy)
			}
			s.waitMetric(`retry_sidecar_truncated_responses_total`, 1)
		})
	}
}

// TestHealthyStreamsPassUnbuffered: a chunked stream and a long poll reach the
// app as they are sent, piece by piece, and complete cleanly.
func TestHealthyStreamsPassUnbuffered(t *testing.T) {
	t.Parallel()
	host := newRawUpstream(t, func(c *rawConn) {
		if _, ok := c.next(); !ok {
			return
		}
		c.write("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
		for i := 0; i < 3; i++ {
			c.write(fmt.Sprintf("6\r\nevent%d\r\n", i))
			time.Sleep(300 * time.Millisecond)
		}
		c.write("0\r\n\r\n")
	}).host()
	s := startSidecar(t, "--policy-file="+policyFile(t, host, fields()...))
	start := time.Now()
	resp, err := s.client().Get("http://" + host + "/events")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	buf := make([]byte, 64)
	n, err := resp.Body.Read(buf)
	if err != nil || string(buf[:n]) != "event0" {
		t.Fatalf("first read = %q, %v; want \"event0\"", buf[:n], err)
	}
	if e := time.Since(start); e > 250*time.Millisecond {
		t.Fatalf("first event after %v; want it before the second is sent (300ms): the proxy buffered", e)
	}
	rest, err := io.ReadAll(resp.Body)
	if err != nil || string(rest) != "event1event2" {
		t.Fatalf("rest = %q, %v; want \"event1event2\" and a clean end", rest, err)
	}
}

// TestNoResponseHeadersIsAHeadersTimeout: an upstream that accepts and reads
// but never answers gives 504 with X-Retry-Timeout-Phase: headers once
// perTryTimeout has passed.
func TestNoResponseHeadersIsAHeadersTimeout(t *testing.T) {
	t.Parallel()
	host := newRawUpstream(t, func(c *rawConn) {
		c.next()
		_, _ = io.Copy(io.Discard, c.Conn) // never answer; until the sidecar gives up
	}).host()
	s := startSidecar(t, "--policy-file="+policyFile(t, host, "maxAttempts: 1", "perTryTimeout: 300ms", "deadline: 5s"))
	r := s.get("http://" + host + "/")
	if r.status != 504 || r.header.Get("X-Retry-Timeout-Phase") != "headers" {
		t.Fatalf("status %d, phase %q; want 504, headers", r.status, r.header.Get("X-Retry-Timeout-Phase"))
	}
	if r.elapsed < 300*time.Millisecond || r.elapsed > 2*time.Second {
		t.Fatalf("answered after %v; want just after the 300ms perTryTimeout", r.elapsed)
	}
	s.waitMetric(`retry_sidecar_timeouts_total{phase="headers",upstream="up"}`, 1)
	if !strings.Contains(s.logs.String(), `"phase":"headers"`) {
		t.Fatal(`no log line with "phase":"headers"`)
	}
}

// fullBacklog is a listener whose accept queue is full: further connection
// attempts get no SYN-ACK, so a dial to it can only time out.
func fullBacklog(t *testing.T) string {
	t.Helper()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, 0)
	if err != nil {
		t.Skipf("socket: %v", err)
	}
	t.Cleanup(func() { syscall.Close(fd) })
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Listen(fd, 0); err != nil {
		t.Fatal(err)
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		t.Fatal(err)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", sa.(*syscall.SockaddrInet4).Port)
	// Fill the queue (backlog 0 still admits one or two) with connections nobody accepts.
	for i := 0; i < 4; i++ {
		c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
		if err != nil {
			break // full
		}
		t.Cleanup(func() { c.Close() })
	}
	if c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond); err == nil {
		c.Close()
		t.Skip("the kernel completes connections beyond the backlog here; cannot provoke a connect timeout")
	}
	return addr
}

func TestConnectTimeoutIsAConnectTimeout(t *testing.T) {
	t.Parallel()
	host := fullBacklog(t)
	s := startSidecar(t, "--policy-file="+policyFile(t, host, "maxAttempts: 1", "connectTimeout: 300ms", "deadline: 5s"))
	r := s.get("http://" + host + "/")
	if r.status != 504 || r.header.Get("X-Retry-Timeout-Phase") != "connect" {
		t.Fatalf("status %d, phase %q, outcome %q; want 504, connect", r.status, r.header.Get("X-Retry-Timeout-Phase"), r.header.Get("X-Retry-Outcome"))
	}
	if r.elapsed < 300*time.Millisecond || r.elapsed > 2*time.Second {
		t.Fatalf("answered after %v; want just after the 300ms connectTimeout", r.elapsed)
	}
	s.waitMetric(`retry_sidecar_timeouts_total{phase="connect",upstream="up"}`, 1)
}

// TestCONNECTDialUsesThePolicyConnectTimeout: a tunnel is opaque, but its
// dial is the one part of it a policy can bound: a CONNECT to a host:port with
// a policy gives up after that policy's connectTimeout, as its requests would,
// not after --dial-timeout.
func TestCONNECTDialUsesThePolicyConnectTimeout(t *testing.T) {
	t.Parallel()
	host := fullBacklog(t)
	s := startSidecar(t, "--dial-timeout=10s", "--policy-file="+policyFile(t, host, "connectTimeout: 300ms", "deadline: 5s"))
	start := time.Now()
	resp := rawRequest(t, s.proxy, "CONNECT "+host+" HTTP/1.1\r\nHost: "+host+"\r\n\r\n")
	if elapsed := time.Since(start); resp.StatusCode != http.StatusBadGateway || elapsed < 300*time.Millisecond || elapsed > 2*time.Second {
		t.Fatalf("CONNECT answered %d after %v; want 502 just after the 300ms connectTimeout", resp.StatusCode, elapsed)
	}
}

func TestPassThroughConnectTimeoutUsesTheDialTimeoutFlag(t *testing.T) {
	t.Parallel()
	host := fullBacklog(t)
	s := startSidecar(t, "--policy-file="+policyFile(t, "unrelated.example", fields()...), "--dial-timeout=300ms")
	r := s.get("http://" + host + "/")
	if r.status != 504 || r.header.Get("X-Retry-Timeout-Phase") != "connect" || r.header.Get("X-Retry-Outcome") != "upstream-error" {
		t.Fatalf("status %d, phase %q, outcome %q; want 504, connect, upstream-error", r.status,
			r.header.Get("X-Retry-Timeout-Phase"), r.header.Get("X-Retry-Outcome"))
	}
}

// TestFullQueueIsAQueueTimeout: with one slot busy and no room in the queue, a
// request is shed at once with X-Retry-Timeout-Phase: queue.
func TestFullQueueIsAQueueTimeout(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	up := newUpstream(t, func(n int, w http.ResponseWriter, r *http.Request) {
		if n == 1 {
			<-release
		}
	})
	s := startSidecar(t, "--policy-file="+policyFile(t, up.host(), fields("concurrency: {maxInFlight: 1, maxQueued: 0, queueTimeout: 1s}")...))
	first := s.goGet(up.url("/slow"))
	polltest.UntilTrue(t, 10*time.Second, func() bool { return len(up.got()) == 1 })
	r := s.get(up.url("/second"))
	if r.status != 503 || r.header.Get("X-Retry-Timeout-Phase") != "queue" || r.header.Get("X-Retry-Outcome") != "shed" {
		t.Fatalf("status %d, phase %q, outcome %q; want 503, queue, shed", r.status,
			r.header.Get("X-Retry-Timeout-Phase"), r.header.Get("X-Retry-Outcome"))
	}
	if r.elapsed > time.Second {
		t.Fatalf("shed after %v; want at once", r.elapsed)
	}
	s.waitMetric(`retry_sidecar_timeouts_total{phase="queue",upstream="up"}`, 1)
	release <- struct{}{}
	<-first
}

// TestDrainCountsInsideTheWait: a 503 whose body stalls (100 bytes announced,
// 10 sent) is drained for at most 1 s, and that drain runs inside the wait the
// response asked for, not before it: the retry goes at max(receipt + wait, end
// of drain) (docs/retry-semantics.md#r9), so a Retry-After: 2 under a 3 s
// deadline is still honoured and retried in time.
func TestDrainCountsInsideTheWait(t *testing.T) {
	t.Parallel()
	tests := map[string]struct {
		retryAfter     string
		minGap, maxGap time.Duration // from the 503 to the retry's arrival
		wantTotalBelow time.Duration
	}{
		"a Retry-After longer than the drain is waited from the response": {
			retryAfter: "2", minGap: 2 * time.Second, maxGap: 2500 * time.Millisecond, wantTotalBelow: 3 * time.Second},
		"a Retry-After shorter than the drain is waited out by the drain": {
			retryAfter: "0", minGap: time.Second, maxGap: 1500 * time.Millisecond, wantTotalBelow: 2 * time.Second},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			responded := make(chan time.Time, 1)
			up := newRawUpstream(t, func(c *rawConn) {
				for {
					if _, ok := c.next(); !ok {
						return
					}
					if c.id == 1 {
						responded <- time.Now()
						c.write("HTTP/1.1 503 Service Unavailable\r\nRetry-After: " + tc.retryAfter + "\r\nContent-Length: 100\r\n\r\n0123456789")
						_, _ = io.Copy(io.Discard, c.Conn) // the other 90 bytes never come
						return
					}
					c.write(respOK("ok"))
				}
			})
			s := startSidecar(t, "--policy-file="+policyFile(t, up.host(), fields("deadline: 3s", "maxAttempts: 2")...))
			r := s.get(up.url("/"))
			assertOutcome(t, r, 200, "success", "2")
			if r.elapsed >= tc.wantTotalBelow {
				t.Errorf("answered after %v, want under %v", r.elapsed, tc.wantTotalBelow)
			}
			got := up.got()
			if len(got) != 2 {
				t.Fatalf("upstream got %d requests, want 2", len(got))
			}
			if gap := got[1].at.Sub(<-responded); gap < tc.minGap || gap >= tc.maxGap {
				t.Errorf("retry arrived %v after the 503, want in [%v, %v)", gap, tc.minGap, tc.maxGap)
			}
		})
	}
}
