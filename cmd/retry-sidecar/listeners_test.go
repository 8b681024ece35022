package main_test

import (
	"bufio"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// ---- every listener is bounded (docs/operations.md#the-stats-and-admin-ports) ----

// The stats and admin servers' timeouts and the stats connection cap, as
// documented; the tests run with the defaults so that they measure what a pod
// gets.
const (
	localHeaderTimeout  = 5 * time.Second
	localIdleTimeout    = 5 * time.Second
	localReadTimeout    = 5 * time.Second
	statsMaxConnections = 64
)

// localConn is a raw client connection to the stats or admin port.
type localConn struct {
	net.Conn
	br *bufio.Reader
}

func dialLocal(t *testing.T, addr string) *localConn {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &localConn{Conn: c, br: bufio.NewReader(c)}
}

// get sends GET path on the connection and reads the response whole; the
// error is that of the first write or read that failed.
func (c *localConn) get(path string, within time.Duration) (*http.Response, error) {
	_ = c.SetDeadline(time.Now().Add(within))
	defer c.SetDeadline(time.Time{})
	if _, err := io.WriteString(c, "GET "+path+" HTTP/1.1\r\nHost: stats\r\n\r\n"); err != nil {
		return nil, err
	}
	resp, err := http.ReadResponse(c.br, nil)
	if err != nil {
		return nil, err
	}
	_, err = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp, err
}

// closedWithin reads from c until the server closes it, for at most limit, and
// returns how long that took after since; ok is false if c is still open.
func (c *localConn) closedWithin(since time.Time, limit time.Duration) (time.Duration, bool) {
	_ = c.SetReadDeadline(since.Add(limit))
	_, err := io.Copy(io.Discard, c.br)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return 0, false
	}
	return time.Since(since), true
}

// trickle writes s one byte every interval until it is written or a write
// fails (the server closed the connection).
func (c *localConn) trickle(s string, interval time.Duration) {
	go func() {
		for i := range len(s) {
			if _, err := io.WriteString(c, s[i:i+1]); err != nil {
				return
			}
			time.Sleep(interval)
		}
	}()
}

func TestStatsAndAdminPortsCloseStalledConnections(t *testing.T) {
	t.Parallel()
	s := startSidecar(t, "--policy-file="+policyFile(t, "api.example.test", fields()...))
	// Each state is a script on a fresh connection; it returns when the
	// server's timer starts.
	states := map[string]struct {
		script  func(t *testing.T, c *localConn) time.Time
		timeout time.Duration
	}{
		"silent after connecting is closed after the header timeout": {
			func(t *testing.T, c *localConn) time.Time { return time.Now() }, localHeaderTimeout},
		"idle after a response is closed after the idle timeout": {
			func(t *testing.T, c *localConn) time.Time {
				if resp, err := c.get("/healthz", 5*time.Second); err != nil {
					t.Fatalf("first request: %v", err)
				} else if resp.Close {
					t.Fatal("first response closes the connection: nothing left to time out")
				}
				return time.Now()
			}, localIdleTimeout},
		"trickling its request head a byte every 250ms is closed after the header timeout": {
			func(t *testing.T, c *localConn) time.Time {
				c.trickle("GET /healthz HTTP/1.1\r\nHost: stats\r\n"+strings.Repeat("X-Slow: 1\r\n", 100)+"\r\n", 250*time.Millisecond)
				return time.Now()
			}, localHeaderTimeout},
		"trickling a request body a byte every 250ms is closed after the read timeout": {
			func(t *testing.T, c *localConn) time.Time {
				start := time.Now()
				if _, err := io.WriteString(c, "POST /config HTTP/1.1\r\nHost: stats\r\nContent-Length: 100\r\n\r\n"); err != nil {
					t.Fatal(err)
				}
				c.trickle(strings.Repeat("x", 100), 250*time.Millisecond)
				return start
			}, localReadTimeout},
	}
	for listener, addr := range map[string]string{"stats": s.stats, "admin": s.admin} {
		for name, st := range states {
			t.Run("a "+listener+" connection "+name, func(t *testing.T) {
				t.Parallel()
				c := dialLocal(t, addr)
				since := st.script(t, c)
				took, closed := c.closedWithin(since, st.timeout+3*time.Second)
				if !closed {
					t.Fatalf("still open %v after the timer started; want closed after %v", st.timeout+3*time.Second, st.timeout)
				}
				if took < st.timeout-250*time.Millisecond || took > st.timeout+1500*time.Millisecond {
					t.Fatalf("closed after %v, want %v", took.Round(time.Millisecond), st.timeout)
				}
			})
		}
	}
}

func TestStatsPortRefusesConnectionsBeyondItsCapAndCountsThem(t *testing.T) {
	t.Parallel()
	s := startSidecar(t, "--policy-file="+policyFile(t, "api.example.test", fields()...))
	held := make([]*localConn, statsMaxConnections)
	for i := range held {
		held[i] = dialLocal(t, s.stats)
		if resp, err := held[i].get("/config", 5*time.Second); err != nil || resp.StatusCode != 200 {
			t.Fatalf("connection %d of %d: %v, %v", i+1, statsMaxConnections, resp, err)
		}
	}
	const excess = 10
	for i := range excess {
		start := time.Now()
		conn, err := net.DialTimeout("tcp", s.stats, 5*time.Second)
		if err != nil {
			continue // reset before the dial returned: refused
		}
		c := &localConn{Conn: conn, br: bufio.NewReader(conn)}
		resp, err := c.get("/config", 3*time.Second)
		conn.Close()
		if err == nil {
			t.Fatalf("connection %d beyond the cap answered %d; want it closed unanswered", i+1, resp.StatusCode)
		}
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			t.Fatalf("connection %d beyond the cap left waiting for %v; want it closed at once", i+1, time.Since(start))
		}
	}
	// The stats port is full: read the counters where the pod reads them.
	if v := s.metric("retry_sidecar_stats_connections_refused_total"); v != excess {
		t.Errorf("retry_sidecar_stats_connections_refused_total = %v, want %d", v, excess)
	}
	if v := s.metric("retry_sidecar_stats_connections"); v != statsMaxConnections {
		t.Errorf("retry_sidecar_stats_connections = %v, want %d", v, statsMaxConnections)
	}
	// A connection closed by its client frees its slot.
	held[0].Close()
	s.waitMetric("retry_sidecar_stats_connections", statsMaxConnections-1)
	if resp, err := dialLocal(t, s.stats).get("/config", 5*time.Second); err != nil || resp.StatusCode != 200 {
		t.Fatalf("after a slot was freed: %v, %v; want 200", resp, err)
	}
}

func TestStatsPortAnswersOnlyGETAndHEADWithSmallHeads(t *testing.T) {
	t.Parallel()
	s := startSidecar(t, "--policy-file="+policyFile(t, "api.example.test", fields()...))
	tests := map[string]struct {
		method, path string
		bigHeader    bool
		status       int
	}{
		"GET /metrics is answered":                       {"GET", "/metrics", false, 200},
		"HEAD /metrics is answered":                      {"HEAD", "/metrics", false, 200},
		"GET /config is answered":                        {"GET", "/config", false, 200},
		"HEAD /config is answered":                       {"HEAD", "/config", false, 200},
		"POST /metrics is not allowed":                   {"POST", "/metrics", false, 405},
		"PUT /metrics is not allowed":                    {"PUT", "/metrics", false, 405},
		"DELETE /metrics is not allowed":                 {"DELETE", "/metrics", false, 405},
		"POST /config is not allowed":                    {"POST", "/config", false, 405},
		"PATCH /config is not allowed":                   {"PATCH", "/config", false, 405},
		"GET /healthz is not served on the pod IP":       {"GET", "/healthz", false, 404},
		"a head of 64 KiB is refused before any handler": {"GET", "/metrics", true, 431},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			req, err := http.NewRequest(tt.method, "http://"+s.stats+tt.path, nil)
			if err != nil {
				t.Fatal(err)
			}
			if tt.bigHeader {
				req.Header.Set("X-Big", strings.Repeat("a", 64<<10))
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != tt.status {
				t.Fatalf("%s %s: %d, want %d", tt.method, tt.path, resp.StatusCode, tt.status)
			}
			if tt.status == 405 && resp.Header.Get("Allow") != "GET, HEAD" {
				t.Errorf("Allow: %q, want \"GET, HEAD\"", resp.Header.Get("Allow"))
			}
		})
	}
}

// A neighbour pod opening thousands of connections to the stats port, each
// with one request, must not push the sidecar towards its memory limit
// (the injector's default is 128 MiB; docs/sidecar.md).
func TestStatsPortStaysSmallUnderThousandsOfConnections(t *testing.T) {
	t.Parallel()
	const conns, maxRSSKiB = 3000, 48 << 10
	s := startSidecar(t, "--policy-file="+policyFile(t, "api.example.test", fields()...))
	before := procStatus(s.pid(), "VmRSS")
	served := 0
	for range conns {
		c, err := net.DialTimeout("tcp", s.stats, 5*time.Second)
		if err != nil {
			continue // reset before the dial returned: refused
		}
		defer c.Close()
		lc := &localConn{Conn: c, br: bufio.NewReader(c)}
		if _, err := lc.get("/config", 5*time.Second); err == nil {
			served++
		}
	}
	rss := procStatus(s.pid(), "VmRSS")
	t.Logf("%d connections, %d served: VmRSS %d KiB before, %d KiB after", conns, served, before, rss)
	if rss > maxRSSKiB {
		t.Fatalf("VmRSS %d KiB with %d connections open (%d served), want at most %d KiB", rss, conns, served, maxRSSKiB)
	}
}
