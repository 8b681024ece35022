package main_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/retrydev/retry-operator/internal/testing/polltest"
)

// The tests drive the real binary, built once, as a forward proxy against real
// HTTP servers on 127.0.0.1.
var sidecarBin string

func TestMain(m *testing.M) {
	if spec := os.Getenv(flakyUpstreamEnv); spec != "" {
		os.Exit(runFlakyUpstream(spec))
	}
	dir, err := os.MkdirTemp("", "retry-sidecar-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	sidecarBin = filepath.Join(dir, "retry-sidecar")
	build := exec.Command("go", "build", "-o", sidecarBin, ".")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "building retry-sidecar:", err)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// ---- the sidecar process ----

type sidecar struct {
	t     *testing.T
	cmd   *exec.Cmd
	proxy string // host:port
	admin string
	// transparent is --transparent-listen as bound, "" without it.
	transparent string
	stats       string // as bound: "[::]:port" for ":0"
	logs        *syncBuffer
	exited      chan struct{}
	err         error
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}
func (s *syncBuffer) String() string { s.mu.Lock(); defer s.mu.Unlock(); return s.b.String() }

// startSidecar runs the binary on ephemeral ports and waits for its ready file.
func startSidecar(t *testing.T, args ...string) *sidecar {
	t.Helper()
	return startSidecarEnv(t, nil, args...)
}

// startSidecarEnv is startSidecar with extra environment variables (KEY=value).
func startSidecarEnv(t *testing.T, env []string, args ...string) *sidecar {
	t.Helper()
	return startSidecarIn(t, nil, env, args...)
}

// startSidecarIn is startSidecarEnv with the binary run by the command
// prefix (e.g. a private mount namespace of its own, resolvingIn).
func startSidecarIn(t *testing.T, prefix, env []string, args ...string) *sidecar {
	t.Helper()
	ready := filepath.Join(t.TempDir(), "ready.json")
	all := append([]string{"--listen=127.0.0.1:0", "--admin-listen=127.0.0.1:0", "--stats-listen=127.0.0.1:0", "--ready-file=" + ready,
		"--reload-debounce=20ms", "--drain-timeout=5s"}, args...)
	s := &sidecar{t: t, logs: &syncBuffer{}, exited: make(chan struct{})}
	argv := append(append(slices.Clone(prefix), sidecarBin), all...)
	s.cmd = exec.Command(argv[0], argv[1:]...)
	s.cmd.Stderr = s.logs
	if env != nil {
		s.cmd.Env = append(os.Environ(), env...)
	}
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { s.err = s.cmd.Wait(); close(s.exited) }()
	t.Cleanup(func() {
		_ = s.cmd.Process.Signal(syscall.SIGKILL)
		<-s.exited
		if t.Failed() {
			t.Logf("sidecar log:\n%s", s.logs.String())
		}
	})
	deadline := time.Now().Add(15 * time.Second)
	for {
		b, err := os.ReadFile(ready)
		if err == nil {
			var r struct{ Listen, Admin, Stats, Transparent string }
			if err := json.Unmarshal(b, &r); err != nil {
				t.Fatal(err)
			}
			s.proxy, s.admin, s.stats, s.transparent = r.Listen, r.Admin, r.Stats, r.Transparent
			s.waitStartLogs()
			return s
		}
		select {
		case <-s.exited:
			t.Fatalf("sidecar exited before listening: %v\n%s", s.err, s.logs.String())
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("sidecar not listening after 15s\n%s", s.logs.String())
		}
	}
}

// waitStartLogs waits until the "listening" line, logged just before the
// ready file is written, has been copied from the process's stderr pipe:
// exec copies it on a goroutine, so a test reading s.logs right after start
// could otherwise see none of the startup lines.
func (s *sidecar) waitStartLogs() {
	s.t.Helper()
	polltest.UntilTrue(s.t, 5*time.Second, func() bool {
		return strings.Contains(s.logs.String(), `"msg":"retry-sidecar listening"`)
	})
}

// client sends through the sidecar as HTTP_PROXY would.
func (s *sidecar) client() *http.Client {
	u := &url.URL{Scheme: "http", Host: s.proxy}
	return &http.Client{Timeout: 20 * time.Second, Transport: &http.Transport{Proxy: http.ProxyURL(u)}}
}

type result struct {
	status  int
	header  http.Header
	body    string
	elapsed time.Duration
}

// do sends req through the proxy and reads the whole response.
func (s *sidecar) do(req *http.Request) result {
	s.t.Helper()
	r, err := s.try(req)
	if err != nil {
		s.t.Fatalf("%s %s: %v", req.Method, req.URL, err)
	}
	return r
}

// try is do for goroutines other than the test's: it returns the error.
func (s *sidecar) try(req *http.Request) (result, error) {
	start := time.Now()
	resp, err := s.client().Do(req)
	if err != nil {
		return result{}, err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return result{status: resp.StatusCode, header: resp.Header, body: string(b), elapsed: time.Since(start)}, nil
}

// goGet sends a GET from another goroutine; the result arrives on the channel
// (status 0 if it failed).
func (s *sidecar) goGet(rawURL string) <-chan result {
	ch := make(chan result, 1)
	req, err := http.NewRequest(http.MethodGet, rawURL, nil)
	if err != nil {
		s.t.Fatal(err)
	}
	go func() {
		r, err := s.try(req)
		if err != nil {
			r.body = err.Error()
		}
		ch <- r
	}()
	return ch
}

func (s *sidecar) get(rawURL string) result {
	s.t.Helper()
	req, err := http.NewRequest(http.MethodGet, rawURL, nil)
	if err != nil {
		s.t.Fatal(err)
	}
	return s.do(req)
}

// adminGet returns the status and body of an admin endpoint.
func (s *sidecar) adminGet(path string) (int, string) {
	s.t.Helper()
	resp, err := http.Get("http://" + s.admin + path)
	if err != nil {
		s.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// statsGet returns the status and body of a stats endpoint, dialled on
// loopback whatever address the port is bound to.
func (s *sidecar) statsGet(path string) (int, string) {
	s.t.Helper()
	_, port, err := net.SplitHostPort(s.stats)
	if err != nil {
		s.t.Fatalf("stats address %q: %v", s.stats, err)
	}
	resp, err := http.Get("http://127.0.0.1:" + port + path)
	if err != nil {
		s.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// metric returns the value of the series whose line starts with series+" ", or -1.
func (s *sidecar) metric(series string) float64 {
	s.t.Helper()
	_, body := s.adminGet("/metrics")
	return metricIn(s.t, body, series)
}

// statsMetric is metric read from the stats port.
func (s *sidecar) statsMetric(series string) float64 {
	s.t.Helper()
	_, body := s.statsGet("/metrics")
	return metricIn(s.t, body, series)
}

func metricIn(t *testing.T, body, series string) float64 {
	t.Helper()
	for _, line := range strings.Split(body, "\n") {
		if strings.HasPrefix(line, series+" ") {
			v, err := strconv.ParseFloat(strings.TrimSpace(line[len(series):]), 64)
			if err != nil {
				t.Fatal(err)
			}
			return v
		}
	}
	return -1
}

// waitMetric waits until the series reaches want.
func (s *sidecar) waitMetric(series string, want float64) {
	s.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		got := s.metric(series)
		if got == want {
			return
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("%s = %v, want %v", series, got, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// ---- scripted upstreams ----

type arrival struct {
	at     time.Time
	method string
	path   string
	header http.Header
	body   string
}

// upstream is an HTTP server on 127.0.0.1 that records every arrival and answers
// with script(n, w, r), n counting arrivals from 1.
type upstream struct {
	srv      *httptest.Server
	mu       sync.Mutex
	arrivals []arrival
}

func newUpstream(t *testing.T, script func(n int, w http.ResponseWriter, r *http.Request)) *upstream {
	u := &upstream{}
	u.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		u.mu.Lock()
		u.arrivals = append(u.arrivals, arrival{at: time.Now(), method: r.Method, path: r.URL.Path, header: r.Header.Clone(), body: string(b)})
		n := len(u.arrivals)
		u.mu.Unlock()
		script(n, w, r)
	}))
	t.Cleanup(u.srv.Close)
	return u
}

func (u *upstream) host() string { return u.srv.Listener.Addr().String() }
func (u *upstream) url(path string) string {
	return "http://" + u.host() + path
}

func (u *upstream) got() []arrival {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]arrival(nil), u.arrivals...)
}

// withAndWithoutPolicy runs f as two parallel subtests: name + " with a
// policy" (the sidecar's policy names the upstream, see policyHost) and name +
// " passed through" (it names another host).
func withAndWithoutPolicy(t *testing.T, name string, f func(t *testing.T, withPolicy bool)) {
	t.Helper()
	for _, withPolicy := range []bool{true, false} {
		t.Run(name+map[bool]string{true: " with a policy", false: " passed through"}[withPolicy], func(t *testing.T) {
			t.Parallel()
			f(t, withPolicy)
		})
	}
}

// policyHost is the host a test's policy names: the upstream's, or with
// withPolicy false a free port no request goes to (the upstream's requests
// pass through).
func policyHost(t *testing.T, upstreamHost string, withPolicy bool) string {
	if withPolicy {
		return upstreamHost
	}
	return freePort(t)
}

// waitForArrivals waits until the upstream has received n requests (at most
// 10s).
func (u *upstream) waitForArrivals(t *testing.T, n int) {
	t.Helper()
	polltest.UntilTrue(t, 10*time.Second, func() bool { return len(u.got()) >= n })
}

func status(code int, header ...string) func(int, http.ResponseWriter, *http.Request) {
	return func(_ int, w http.ResponseWriter, _ *http.Request) {
		for i := 0; i+1 < len(header); i += 2 {
			w.Header().Set(header[i], header[i+1])
		}
		w.WriteHeader(code)
		io.WriteString(w, http.StatusText(code))
	}
}

// sequence answers arrival n with steps[n-1], repeating the last.
func sequence(steps ...func(int, http.ResponseWriter, *http.Request)) func(int, http.ResponseWriter, *http.Request) {
	return func(n int, w http.ResponseWriter, r *http.Request) {
		steps[min(n, len(steps))-1](n, w, r)
	}
}

// ---- policies ----

// policyFile writes a RetryPolicy with one upstream "up" for host; fields are
// YAML lines of the upstream (indented by the helper).
func policyFile(t *testing.T, host string, fields ...string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "policy.yaml")
	writeFile(t, p, policyYAML("test", "up", host, fields...))
	return p
}

func policyYAML(name, upstream, host string, fields ...string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "apiVersion: policy.retry.dev/v1alpha1\nkind: RetryPolicy\nmetadata: {name: %s}\nspec:\n  upstreams:\n  - name: %s\n    hosts: [%q]\n", name, upstream, host)
	for _, f := range fields {
		b.WriteString("    " + f + "\n")
	}
	return b.String()
}

// writeFile replaces a file atomically, as editors and kubectl cp do.
func writeFile(t *testing.T, path, content string) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// kubeletWrite updates a ConfigMap / downward API volume directory the way the
// kubelet's atomic writer does: a new timestamped directory, a ..data_tmp symlink
// renamed over ..data, and per-file symlinks into ..data.
func kubeletWrite(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	ts := filepath.Join(dir, fmt.Sprintf("..%d", time.Now().UnixNano()))
	if err := os.MkdirAll(ts, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(ts, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	tmp := filepath.Join(dir, "..data_tmp")
	if err := os.Symlink(filepath.Base(ts), tmp); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
	for name := range files {
		link := filepath.Join(dir, name)
		if _, err := os.Lstat(link); err != nil {
			if err := os.Symlink(filepath.Join("..data", name), link); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// ---- raw connections ----

// rawRequest writes a request as bytes to the proxy and reads one response.
func rawRequest(t *testing.T, proxy, request string) *http.Response {
	t.Helper()
	c, err := net.DialTimeout("tcp", proxy, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	_ = c.SetDeadline(time.Now().Add(20 * time.Second))
	if _, err := io.WriteString(c, request); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body = io.NopCloser(bytes.NewReader(b))
	return resp
}

// freePort returns a 127.0.0.1 address nothing listens on.
// freePort returns a loopback address that refuses connections for the rest of
// the test: a socket bound to it that never listens holds the port, so no
// listener started meanwhile (a sidecar on port 0, say) can take it.
func freePort(t *testing.T) string {
	t.Helper()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Close(fd) })
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatal(err)
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("127.0.0.1:%d", sa.(*syscall.SockaddrInet4).Port)
}

func withCancel(d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), d)
}

func assertOutcome(t *testing.T, r result, status int, outcome, attempts string) {
	t.Helper()
	if r.status != status || r.header.Get("X-Retry-Outcome") != outcome || r.header.Get("X-Retry-Attempts") != attempts {
		t.Fatalf("got %d, X-Retry-Outcome %q, X-Retry-Attempts %q; want %d, %q, %q (body %q)",
			r.status, r.header.Get("X-Retry-Outcome"), r.header.Get("X-Retry-Attempts"), status, outcome, attempts, r.body)
	}
}
