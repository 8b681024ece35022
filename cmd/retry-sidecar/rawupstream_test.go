package main_test

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// ---- hostile upstreams written on raw TCP ----

// rawUpstream is a TCP server on 127.0.0.1 whose connections are served by a
// test-written function, byte for byte: it can close idle connections, drop a
// request it has read, write stray bytes or a malformed head. Every request it
// reads is recorded with the connection it came on.
type rawUpstream struct {
	t     *testing.T
	ln    net.Listener
	serve func(c *rawConn)

	mu       sync.Mutex
	arrivals []rawArrival
	conns    int
	open     map[net.Conn]struct{}
	changed  chan struct{} // closed and replaced on every arrival
}

type rawArrival struct {
	arrival
	conn int // 1-based connection number
	nth  int // 1-based request number on that connection
	head string
}

// rawConn is one upstream connection.
type rawConn struct {
	net.Conn
	u   *rawUpstream
	id  int
	n   int // requests read so far
	br  *bufio.Reader
	raw *recordingReader
}

// recordingReader keeps the bytes read through it (the raw request head).
type recordingReader struct {
	r   io.Reader
	on  bool
	buf strings.Builder
}

func (r *recordingReader) Read(p []byte) (int, error) {
	n, err := r.r.Read(p)
	if r.on {
		r.buf.Write(p[:n])
	}
	return n, err
}

func newRawUpstream(t *testing.T, serve func(c *rawConn)) *rawUpstream {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	u := &rawUpstream{t: t, ln: ln, serve: serve, open: map[net.Conn]struct{}{}, changed: make(chan struct{})}
	var wg sync.WaitGroup
	t.Cleanup(func() {
		ln.Close()
		u.mu.Lock()
		for c := range u.open {
			c.Close()
		}
		u.mu.Unlock()
		wg.Wait()
	})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			nc, err := ln.Accept()
			if err != nil {
				return
			}
			u.mu.Lock()
			u.conns++
			id := u.conns
			u.open[nc] = struct{}{}
			u.mu.Unlock()
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer func() {
					nc.Close()
					u.mu.Lock()
					delete(u.open, nc)
					u.mu.Unlock()
				}()
				rr := &recordingReader{r: nc}
				c := &rawConn{Conn: nc, u: u, id: id, raw: rr, br: bufio.NewReader(rr)}
				serve(c)
			}()
		}
	}()
	return u
}

func (u *rawUpstream) host() string           { return u.ln.Addr().String() }
func (u *rawUpstream) url(path string) string { return "http://" + u.host() + path }

func (u *rawUpstream) got() []rawArrival {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]rawArrival(nil), u.arrivals...)
}

func (u *rawUpstream) connCount() int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.conns
}

// attemptHeaders lists the X-Retry-Attempt value of every arrival ("-" if absent).
func (u *rawUpstream) attemptHeaders() string {
	var vals []string
	for _, a := range u.got() {
		v := a.header.Get("X-Retry-Attempt")
		if v == "" {
			v = "-"
		}
		vals = append(vals, v)
	}
	return strings.Join(vals, " ")
}

// waitArrivals waits until at least n requests arrived.
func (u *rawUpstream) waitArrivals(n int, within time.Duration) {
	u.t.Helper()
	deadline := time.After(within)
	for {
		u.mu.Lock()
		have, ch := len(u.arrivals), u.changed
		u.mu.Unlock()
		if have >= n {
			return
		}
		select {
		case <-ch:
		case <-deadline:
			u.t.Fatalf("upstream got %d requests within %v, want %d", have, within, n)
		}
	}
}

// next reads one request (head and body) and records it; false when the
// connection ended first.
func (c *rawConn) next() (*http.Request, bool) {
	c.raw.buf.Reset()
	c.raw.on = true
	req, err := http.ReadRequest(c.br)
	c.raw.on = false
	if err != nil {
		return nil, false
	}
	head := c.raw.buf.String()
	if i := strings.Index(head, "\r\n\r\n"); i >= 0 {
		head = head[:i+4]
	}
	b, _ := io.ReadAll(req.Body)
	c.n++
	c.u.mu.Lock()
	c.u.arrivals = append(c.u.arrivals, rawArrival{
		arrival: arrival{at: time.Now(), method: req.Method, path: req.URL.RequestURI(), header: req.Header.Clone(), body: string(b)},
		conn:    c.id, nth: c.n, head: head,
	})
	close(c.u.changed)
	c.u.changed = make(chan struct{})
	c.u.mu.Unlock()
	return req, true
}

// nextHead reads one request head and records it without reading its body.
func (c *rawConn) nextHead() (*http.Request, bool) {
	req, err := http.ReadRequest(c.br)
	if err != nil {
		return nil, false
	}
	c.n++
	c.u.mu.Lock()
	c.u.arrivals = append(c.u.arrivals, rawArrival{
		arrival: arrival{at: time.Now(), method: req.Method, path: req.URL.RequestURI(), header: req.Header.Clone()},
		conn:    c.id, nth: c.n,
	})
	close(c.u.changed)
	c.u.changed = make(chan struct{})
	c.u.mu.Unlock()
	return req, true
}

func (c *rawConn) write(s string) bool {
	_, err := io.WriteString(c.Conn, s)
	return err == nil
}

// respOK is a keep-alive 200 whose body is body.
func respOK(body string) string {
	return "HTTP/1.1 200 OK\r\nContent-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n" + body
}

// attemptsCounted sums retry_sidecar_attempts_total of an upstream over every
// status and error class.
func (s *sidecar) attemptsCounted(upstream string) float64 {
	s.t.Helper()
	_, body := s.adminGet("/metrics")
	sum := 0.0
	for _, line := range strings.Split(body, "\n") {
		if !strings.HasPrefix(line, "retry_sidecar_attempts_total{") || !strings.Contains(line, `upstream="`+upstream+`"`) {
			continue
		}
		f := strings.Fields(line)
		v, err := strconv.ParseFloat(f[len(f)-1], 64)
		if err != nil {
			s.t.Fatal(err)
		}
		sum += v
	}
	return sum
}

// ---- watching the sidecar process ----

func (s *sidecar) pid() int { return s.cmd.Process.Pid }

// procStatus returns a field of /proc/PID/status in KiB (VmRSS, VmHWM), or -1.
func procStatus(pid int, field string) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return -1
	}
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, field+":") {
			f := strings.Fields(line[len(field)+1:])
			if len(f) > 0 {
				v, err := strconv.ParseInt(f[0], 10, 64)
				if err == nil {
					return v
				}
			}
		}
	}
	return -1
}

// fdCount is the number of open file descriptors of pid, or -1.
func fdCount(pid int) int {
	ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		return -1
	}
	return len(ents)
}

// watchdog kills the sidecar as soon as it holds more than maxFDs descriptors
// or more than maxRSS KiB: a request loop regression must fail the test, not
// take the machine down. It reports what it saw when stopped.
type watchdog struct {
	stop chan struct{}
	done chan struct{}

	mu      sync.Mutex
	peakFDs int
	peakRSS int64
	reason  string // why it killed the sidecar; "" if it did not
}

func (s *sidecar) watch(maxFDs int, maxRSSKiB int64) *watchdog {
	w := &watchdog{stop: make(chan struct{}), done: make(chan struct{})}
	pid := s.pid()
	go func() {
		defer close(w.done)
		tick := time.NewTicker(2 * time.Millisecond)
		defer tick.Stop()
		for {
			fds, rss := fdCount(pid), procStatus(pid, "VmRSS")
			w.mu.Lock()
			w.peakFDs, w.peakRSS = max(w.peakFDs, fds), max(w.peakRSS, rss)
			if fds > maxFDs || rss > maxRSSKiB {
				w.reason = fmt.Sprintf("killed the sidecar: %d fds (limit %d), RSS %d KiB (limit %d)", fds, maxFDs, rss, maxRSSKiB)
				w.mu.Unlock()
				_ = s.cmd.Process.Signal(syscall.SIGKILL)
				return
			}
			w.mu.Unlock()
			select {
			case <-w.stop:
				return
			case <-s.exited:
				return
			case <-tick.C:
			}
		}
	}()
	return w
}

// killed says why the watchdog killed the sidecar, or "".
func (w *watchdog) killed() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.reason
}

func (w *watchdog) peaks() (int, int64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.peakFDs, w.peakRSS
}

func (w *watchdog) end() {
	select {
	case <-w.stop:
	default:
		close(w.stop)
	}
	<-w.done
}

// ---- raw clients ----

// rawExchange writes request (head and body, from a goroutine: the proxy may
// answer before reading it all) to the proxy and reads one response; the body
// is read whole. It returns an error instead of failing.
func rawExchange(proxy, head string, body io.Reader, timeout time.Duration) (*http.Response, string, error) {
	c, err := net.DialTimeout("tcp", proxy, 5*time.Second)
	if err != nil {
		return nil, "", err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(timeout))
	go func() {
		if _, err := io.WriteString(c, head); err != nil {
			return
		}
		if body != nil {
			_, _ = io.Copy(c, body)
		}
	}()
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return nil, "", err
	}
	b, err := io.ReadAll(resp.Body)
	return resp, string(b), err
}

// zeros is an endless reader of zero bytes (large bodies without allocating).
type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}
