//go:build linux

package main_test

// The combination matrix (docs/development.md#the-combination-matrix): every
// app-side path × upstream kind × wait × app behaviour × method, generated from the
// dimensions, each cell's expectation computed from the rules by matrixExpect
// and asserted exactly: the attempts the upstream saw (X-Retry-Attempt of each,
// over TLS or not, HTTP/1.1 or HTTP/2) and the response the app read.
//
// One sidecar per path serves every cell of that path, each cell with an
// upstream (and a policy) of its own so that holds, queues and tokens do not
// cross. The cells run at once, in goroutines; their assertions are subtests.

import (
	"bufio"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/retrydev/retry-operator/api/v1alpha1"
)

// ---- the dimensions ----

type matrixPath string

const (
	matrixFastPath    matrixPath = "the fast path"
	matrixNetHTTP     matrixPath = "net/http (--http1-fast-path=false)"
	matrixTransparent matrixPath = "the transparent listener"
)

type matrixUpstream string

const (
	matrixPlain matrixUpstream = "plain HTTP/1.1"
	matrixTLS   matrixUpstream = "HTTP/1.1 over TLS"
	matrixH2    matrixUpstream = "HTTP/2 over TLS (ALPN)"
)

type matrixWait string

const (
	matrixBackoff    matrixWait = "a backoff"
	matrixRetryAfter matrixWait = "a Retry-After"
	matrixHold       matrixWait = "a pacing hold"
	matrixQueue      matrixWait = "a concurrency queue slot"
	matrixToken      matrixWait = "a rate-limit token"
	matrixReplay     matrixWait = "replay memory"
	matrixStall      matrixWait = "the drain of a stalled 503"
)

type matrixApp string

const (
	matrixStays          matrixApp = "stays"
	matrixBefore         matrixApp = "hangs up before the wait"
	matrixDuring         matrixApp = "hangs up during the wait"
	matrixAfter          matrixApp = "hangs up after the wait"
	matrixPipelines      matrixApp = "pipelines a second request"
	matrixPipelinesHangs matrixApp = "pipelines a second request and hangs up during the wait"
)

type matrixMethod string

const (
	matrixGET  matrixMethod = "GET"  // replayable, no body
	matrixPOST matrixMethod = "POST" // not replayable: a body and no idempotency key
)

var (
	matrixPaths     = []matrixPath{matrixFastPath, matrixNetHTTP, matrixTransparent}
	matrixUpstreams = []matrixUpstream{matrixPlain, matrixTLS, matrixH2}
	matrixWaits     = []matrixWait{matrixBackoff, matrixRetryAfter, matrixHold, matrixQueue, matrixToken, matrixReplay, matrixStall}
	matrixApps      = []matrixApp{matrixStays, matrixBefore, matrixDuring, matrixAfter, matrixPipelines, matrixPipelinesHangs}
	matrixMethods   = []matrixMethod{matrixGET, matrixPOST}
)

type matrixCell struct {
	path   matrixPath
	up     matrixUpstream
	wait   matrixWait
	app    matrixApp
	method matrixMethod
}

func (c matrixCell) String() string {
	return fmt.Sprintf("%s to %s: a %s waits for %s and the app %s", c.path, c.up, c.method, c.wait, c.app)
}

// matrixCells is every combination of the dimensions.
func matrixCells() []matrixCell {
	var cells []matrixCell
	for _, p := range matrixPaths {
		for _, u := range matrixUpstreams {
			for _, w := range matrixWaits {
				for _, a := range matrixApps {
					for _, m := range matrixMethods {
						cells = append(cells, matrixCell{p, u, w, a, m})
					}
				}
			}
		}
	}
	return cells
}

// ---- the rules: what each cell must see ----

// The waits the scenarios arrange (each long enough for the app to hang up
// inside it, however loaded the machine).
//
// A token is refilled at the policy's rate from the primer's start, but the
// cell's request is written after the primer's round trip, which a loaded
// machine stretches: its period is longer.
const (
	matrixWaitLength  = 3 * time.Second // backoff, Retry-After, hold
	matrixTokenPeriod = 6 * time.Second
	matrixHangUpAt    = 300 * time.Millisecond
)

// A stalled 503 (matrixStall) announces 100000 bytes and sends 10: the drain
// before the retry stops after 1 s, the read of the last answer at the
// deadline, so the app gets 504 deadline-exceeded at the deadline
// (docs/retry-semantics.md#r9). The deadline leaves the first attempt 3 s for
// its headers, and the margin is generous: every cell starts at once on a
// machine that may have 2 CPUs (a TLS attempt's headers took 1.4 s there), and
// without the bound the app gets no answer at all.
const (
	matrixStallDeadline = 4 * time.Second
	matrixStallMargin   = time.Second
)

// waitLength is how long the cell's wait lasts at most.
func (c matrixCell) waitLength() time.Duration {
	switch c.wait {
	case matrixToken:
		return matrixTokenPeriod
	case matrixStall:
		return matrixStallDeadline
	}
	return matrixWaitLength
}

// matrixWant is what a cell must observe.
type matrixWant struct {
	skip string // why the cell does not apply
	// attempts are the X-Retry-Attempt values of the arrivals of the cell's
	// request at the upstream, in order; every arrival is over TLS for the
	// TLS kinds, and HTTP/2 for matrixH2.
	attempts []string
	// The response the app reads (status 0: it hung up, nothing to read).
	status            int
	outcome, count    string
	second            []string // arrivals of the pipelined GET
	secondStatus      int      // the pipelined GET's response; 0: none read
	secondOutcome     string
	waitsBeforeFirst  bool // the wait comes before the first attempt
	retriedAfterWait  bool // the wait comes between attempt 1 and 2
	firstStatusBefore int  // the upstream's answer to attempt 1 when a wait follows it
	// answeredWithin bounds the time from the app's request to the head of
	// the response it reads (0: not asserted).
	answeredWithin time.Duration
}

// matrixExpect computes a cell's expectation from the rules
// (docs/retry-semantics.md, docs/pacing.md, docs/sidecar.md):
//
//   - a hold, a queue slot and a token are waited for before the first
//     attempt, by every method; backoff and Retry-After come after a first
//     attempt answered 503 (or 429 Retry-After), and only a replayable request
//     is retried: a POST's 503 or 429 is its answer (not-replayable);
//   - an app gone is gone everywhere (docs/sidecar.md, "What it does with a
//     request"): from its hang-up on nothing more is sent for its request,
//     whatever it waits for, nor for a request pipelined behind it; what was
//     sent before stays sent;
//   - whatever the app-side path, the upstream kind decides the wire: TLS for
//     the TLS kinds, HTTP/2 where ALPN offers it;
//   - the deadline bounds every drain (docs/retry-semantics.md#r9): when
//     every answer is a 503 whose body stalls, the app reads 504
//     deadline-exceeded by the deadline, and every stalled connection (or
//     stream) is closed.
func matrixExpect(c matrixCell) matrixWant {
	var w matrixWant
	switch c.wait {
	case matrixReplay:
		if c.method == matrixGET {
			w.skip = "a GET without a body reserves no replay memory: there is nothing to wait for"
		} else {
			w.skip = "a POST without an idempotency key is streamed once and reserves no replay memory"
		}
		return w
	case matrixHold, matrixQueue, matrixToken:
		w.waitsBeforeFirst = true
	case matrixBackoff, matrixStall:
		w.firstStatusBefore = 503
	case matrixRetryAfter:
		w.firstStatusBefore = 429
	}
	w.retriedAfterWait = !w.waitsBeforeFirst && c.method == matrixGET
	if !w.waitsBeforeFirst && !w.retriedAfterWait {
		switch c.app {
		case matrixDuring, matrixAfter, matrixPipelinesHangs:
			w.skip = fmt.Sprintf("a %s is not replayed: no wait follows its only attempt", c.method)
			return w
		}
	}
	// sent: the attempts the request makes when the app stays.
	sent := []string{"1"}
	if w.retriedAfterWait {
		sent = []string{"1", "2"}
	}
	switch c.app {
	case matrixStays, matrixPipelines:
		w.attempts = sent
		w.status, w.outcome, w.count = 200, "success", strconv.Itoa(len(sent))
		if !w.waitsBeforeFirst && !w.retriedAfterWait {
			w.status, w.outcome = w.firstStatusBefore, "not-replayable"
		}
		if c.wait == matrixStall {
			// The last answer stalls too: cut at the deadline.
			w.status, w.outcome = 504, "deadline-exceeded"
			w.answeredWithin = matrixStallDeadline + matrixStallMargin
		}
		if c.app == matrixPipelines {
			w.second, w.secondStatus, w.secondOutcome = []string{"1"}, 200, "success"
		}
	case matrixBefore, matrixDuring, matrixPipelinesHangs:
		// Gone before the wait ends: only what preceded the wait was sent.
		if !w.waitsBeforeFirst {
			w.attempts = []string{"1"}
		}
	case matrixAfter:
		// Gone while the attempt that followed the wait was at the upstream.
		w.attempts = sent
	}
	return w
}

// ---- the upstreams ----

// matrixArrival is one request the upstream read.
type matrixArrival struct {
	path, attempt, proto string
	tls                  bool
	at                   time.Time
}

// matrixUpstreamRig is a cell's upstream: one or two listeners that record
// what arrives and answer by the cell's script.
type matrixUpstreamRig struct {
	c    matrixCell
	want matrixWant

	mu       sync.Mutex
	arrivals []matrixArrival
	stalls   int           // stalled answers whose connection is still open
	cellN    int           // arrivals of /cell so far
	arrived  chan string   // every arrival's path, as it comes
	answered chan int      // n of each /cell arrival, once answered
	appGone  chan struct{} // closed when the app has hung up
	release  chan struct{} // closed to let /block finish (queue)
	servers  []*http.Server
}

func newMatrixUpstreamRig(c matrixCell) *matrixUpstreamRig {
	return &matrixUpstreamRig{c: c, want: matrixExpect(c), arrived: make(chan string, 16), answered: make(chan int, 16),
		appGone: make(chan struct{}), release: make(chan struct{})}
}

// holdsAnswer says whether the upstream keeps /cell arrival n unanswered until
// the app has hung up: the attempt in flight "before" a backoff or
// Retry-After, or the one that follows the wait "after" it.
func (u *matrixUpstreamRig) holdsAnswer(n int) bool {
	switch u.c.app {
	case matrixBefore:
		return !u.want.waitsBeforeFirst && n == 1
	case matrixAfter:
		return n == len(u.want.attempts)
	}
	return false
}

func (u *matrixUpstreamRig) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	_, _ = io.Copy(io.Discard, r.Body)
	u.mu.Lock()
	u.arrivals = append(u.arrivals, matrixArrival{path: r.URL.Path, attempt: r.Header.Get("X-Retry-Attempt"), proto: r.Proto, tls: r.TLS != nil, at: time.Now()})
	n := 0
	if r.URL.Path == "/cell" {
		u.cellN++
		n = u.cellN
	}
	u.mu.Unlock()
	u.arrived <- r.URL.Path
	switch r.URL.Path {
	case "/prime": // spends the token; for a hold, announces the quota spent
		if u.c.wait == matrixHold {
			w.Header().Set("RateLimit", fmt.Sprintf(`"default";r=0;t=%d`, int(matrixWaitLength/time.Second)))
		}
	case "/block": // holds the only concurrency slot until released
		select {
		case <-u.release:
		case <-r.Context().Done():
		}
	case "/cell":
		if u.holdsAnswer(n) {
			select {
			case <-u.appGone:
				time.Sleep(100 * time.Millisecond) // let the sidecar see the hang-up first
			case <-time.After(10 * time.Second):
			}
		}
		if u.c.wait == matrixStall {
			u.stall(w, r, n)
			return
		}
		if n == 1 {
			switch u.c.wait {
			case matrixBackoff:
				w.WriteHeader(503)
			case matrixRetryAfter:
				w.Header().Set("Retry-After", strconv.Itoa(int(matrixWaitLength/time.Second)))
				w.WriteHeader(429)
			}
		}
		defer func() { u.answered <- n }()
	}
	io.WriteString(w, "ok")
}

// stall answers /cell arrival n with a 503 announcing 100000 bytes of which 10
// come, and nothing more until the sidecar closes the connection (or resets
// the stream), at most 10 s.
func (u *matrixUpstreamRig) stall(w http.ResponseWriter, r *http.Request, n int) {
	w.Header().Set("Content-Length", "100000")
	w.WriteHeader(503)
	io.WriteString(w, "0123456789")
	_ = http.NewResponseController(w).Flush()
	u.mu.Lock()
	u.stalls++
	u.mu.Unlock()
	u.answered <- n
	select {
	case <-r.Context().Done():
		u.mu.Lock()
		u.stalls--
		u.mu.Unlock()
	case <-time.After(10 * time.Second):
	}
}

// openStalls is the number of stalled answers not yet closed by the sidecar.
func (u *matrixUpstreamRig) openStalls() int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.stalls
}

// cells is the number of arrivals of the cell's request so far.
func (u *matrixUpstreamRig) cells() int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.cellN
}

func (u *matrixUpstreamRig) got() []matrixArrival {
	u.mu.Lock()
	defer u.mu.Unlock()
	return slices.Clone(u.arrivals)
}

// serve starts an upstream server on ln: plain, or TLS with the ALPN protocols
// of the cell's kind.
func (u *matrixUpstreamRig) serve(ln net.Listener, cert *tls.Certificate) {
	srv := &http.Server{Handler: u, ReadHeaderTimeout: 10 * time.Second}
	p := new(http.Protocols)
	p.SetHTTP1(true)
	if cert != nil && u.c.up == matrixH2 {
		p.SetHTTP2(true)
	}
	srv.Protocols = p
	u.servers = append(u.servers, srv)
	if cert == nil {
		go srv.Serve(ln)
		return
	}
	srv.TLSConfig = &tls.Config{Certificates: []tls.Certificate{*cert}}
	go srv.ServeTLS(ln, "", "")
}

func (u *matrixUpstreamRig) close() {
	for _, s := range u.servers {
		s.Close()
	}
}

// ---- one sidecar per path ----

// matrixRig is a sidecar and the cells' upstreams of one app-side path.
type matrixRig struct {
	path matrixPath
	dial func(addr string) (net.Conn, error)          // the app's dialer
	cell map[matrixCell]*matrixUpstreamRig            // by cell
	addr map[matrixCell]struct{ target, host string } // request-target and Host
	dest map[matrixCell]string                        // what the app connects to
}

// matrixPolicy is one RetryPolicy document for a cell's upstream at host.
func matrixPolicy(i int, c matrixCell, host, tlsFields string) string {
	f := []string{"deadline: 8s", "maxAttempts: 3", "retryAfter: {maxWait: 5s, spread: 1ms}"}
	if c.wait == matrixStall {
		// Two attempts whatever the machine's speed: the second answer is the last.
		f[0], f[1] = "deadline: "+matrixStallDeadline.String(), "maxAttempts: 2"
	}
	switch c.wait {
	case matrixBackoff:
		f = append(f, fmt.Sprintf("backoff: {base: %s, max: %s, jitter: None}", matrixWaitLength, matrixWaitLength))
	default:
		f = append(f, "backoff: {base: 10ms, max: 20ms, jitter: None}")
	}
	switch c.wait {
	case matrixHold:
		f = append(f, "pacing: {rateLimitHeaders: true}")
	case matrixQueue:
		f = append(f, "concurrency: {maxInFlight: 1, maxQueued: 4, queueTimeout: 7s}")
	case matrixToken:
		f = append(f, fmt.Sprintf("rateLimit: {requestsPerMinute: %d, burst: 1}", int(time.Minute/matrixTokenPeriod)))
	}
	if tlsFields != "" {
		f = append(f, "tls: "+tlsFields)
	}
	return policyYAML(fmt.Sprintf("cell-%d", i), "up", host, f...)
}

// matrixCAConfigMap is the CA as the ConfigMap document caCertificateRefs names.
func matrixCAConfigMap(ca *testCA) string {
	return "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: test-ca}\ndata:\n  ca.crt: |\n    " +
		strings.ReplaceAll(strings.TrimSpace(ca.pem), "\n", "\n    ") + "\n"
}

// newForwardMatrixRig starts the cells' upstreams on 127.0.0.1 and a sidecar
// whose --listen the app uses as its HTTP proxy (absolute-form requests).
func newForwardMatrixRig(t *testing.T, path matrixPath, cells []matrixCell, ca *testCA, cert tls.Certificate) *matrixRig {
	r := &matrixRig{path: path, cell: map[matrixCell]*matrixUpstreamRig{}, addr: map[matrixCell]struct{ target, host string }{},
		dest: map[matrixCell]string{}, dial: func(a string) (net.Conn, error) { return net.DialTimeout("tcp", a, 5*time.Second) }}
	docs := []string{matrixCAConfigMap(ca)}
	for i, c := range cells {
		u := newMatrixUpstreamRig(c)
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		must(t, err)
		tlsFields := ""
		if c.up == matrixPlain {
			u.serve(ln, nil)
		} else {
			u.serve(ln, &cert)
			tlsFields = "{hostname: upstream.test, caCertificateRefs: [{name: test-ca}]}"
		}
		t.Cleanup(u.close)
		host := ln.Addr().String()
		r.cell[c] = u
		r.addr[c] = struct{ target, host string }{"http://" + host + "/", host}
		docs = append(docs, matrixPolicy(i, c, host, tlsFields))
	}
	p := filepath.Join(t.TempDir(), "policies.yaml")
	writeFile(t, p, strings.Join(docs, "---\n"))
	args := []string{"--policy-file=" + p}
	if path == matrixNetHTTP {
		args = append(args, "--http1-fast-path=false")
	}
	s := startSidecar(t, args...)
	for _, c := range cells {
		r.dest[c] = s.proxy
	}
	return r
}

// newTransparentMatrixRig builds a network namespace where each cell's
// upstream listens on 127.0.1.N (port 80, and 443 for the TLS kinds), the
// redirect rules send the app's port-80 connections to the sidecar's
// transparent listener, and the app connects from inside the namespace
// (origin-form requests, Host: 127.0.1.N).
func newTransparentMatrixRig(t *testing.T, cells []matrixCell, ca *testCA, cert tls.Certificate) *matrixRig {
	n := newNetns(t)
	if len(cells) > 250 {
		t.Fatalf("%d cells: more than the 127.0.1.N addresses", len(cells))
	}
	r := &matrixRig{path: matrixTransparent, cell: map[matrixCell]*matrixUpstreamRig{}, addr: map[matrixCell]struct{ target, host string }{},
		dest: map[matrixCell]string{}}
	r.dial = func(a string) (c net.Conn, err error) {
		if nerr := matrixInNetns(n.name, func() { c, err = net.DialTimeout("tcp", a, 5*time.Second) }); nerr != nil {
			return nil, nerr
		}
		return c, err
	}
	listen := func(addr string) net.Listener {
		var ln net.Listener
		var err error
		must(t, matrixInNetns(n.name, func() { ln, err = net.Listen("tcp", addr) }))
		must(t, err)
		return ln
	}
	docs := []string{matrixCAConfigMap(ca)}
	for i, c := range cells {
		ip := fmt.Sprintf("127.0.1.%d", i+1)
		u := newMatrixUpstreamRig(c)
		// Port 80 is where the app's connection was going: a clear-text
		// request that reaches it is recorded, whatever the kind.
		u.serve(listen(ip+":80"), nil)
		tlsFields := ""
		if c.up != matrixPlain {
			u.serve(listen(ip+":443"), &cert)
			tlsFields = "{hostname: upstream.test, port: 443, caCertificateRefs: [{name: test-ca}]}"
		}
		t.Cleanup(u.close)
		r.cell[c] = u
		r.addr[c] = struct{ target, host string }{"/", ip}
		r.dest[c] = ip + ":80"
		docs = append(docs, matrixPolicy(i, c, ip, tlsFields))
	}
	policy := filepath.Join(n.dir, "policies.yaml")
	must(t, os.WriteFile(policy, []byte(strings.Join(docs, "---\n")), 0o644))
	n.startSidecar(policy, filepath.Join(n.dir, "run", "matrix.ready"))
	n.must(n.bin, "redirect", "--ports", "80", "--to", strconv.Itoa(v1alpha1.TransparentPort), "--exclude-uid", strconv.Itoa(sidecarUID))
	return r
}

// matrixInNetns runs f on an OS thread switched into the named network
// namespace: the sockets f creates belong to it for their whole life.
func matrixInNetns(name string, f func()) error {
	runtime.LockOSThread()
	self, err := os.Open("/proc/thread-self/ns/net")
	if err != nil {
		runtime.UnlockOSThread()
		return err
	}
	defer self.Close()
	ns, err := os.Open(filepath.Join("/run/netns", name))
	if err != nil {
		runtime.UnlockOSThread()
		return err
	}
	defer ns.Close()
	if err := unix.Setns(int(ns.Fd()), unix.CLONE_NEWNET); err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("entering network namespace %s: %w", name, err)
	}
	f()
	if err := unix.Setns(int(self.Fd()), unix.CLONE_NEWNET); err != nil {
		// The thread stays locked and dies with its goroutine, never reused
		// in the wrong namespace.
		return fmt.Errorf("leaving network namespace %s: %w", name, err)
	}
	runtime.UnlockOSThread()
	return nil
}

// matrixNetnsMissing says why this machine cannot run the transparent path,
// or "" (newNetns needs the same).
func matrixNetnsMissing() string {
	if os.Geteuid() != 0 {
		return "the transparent listener needs root: a network namespace (ip netns add) and redirect rules"
	}
	for _, tool := range []string{"ip", "setpriv"} {
		if _, err := exec.LookPath(tool); err != nil {
			return fmt.Sprintf("the transparent listener needs %s (iproute2, util-linux): %v", tool, err)
		}
	}
	return ""
}

// ---- running a cell ----

// matrixGot is what a cell observed.
type matrixGot struct {
	arrivals       []matrixArrival
	status         int
	outcome, count string
	secondStatus   int
	secondOutcome  string
	answeredAfter  time.Duration // from the app's request to the response head
	openStalls     int           // stalled answers the sidecar left open
	hungUp         time.Time     // when the app closed its connection, if it did
	err            string        // a step of the scenario that failed
}

// request is the app's request for path, with a body for a POST.
func (r *matrixRig) request(c matrixCell, path, method string) string {
	a := r.addr[c]
	head := fmt.Sprintf("%s %s HTTP/1.1\r\nHost: %s\r\n", method, a.target+strings.TrimPrefix(path, "/"), a.host)
	if method == "POST" {
		return head + "Content-Type: text/plain\r\nContent-Length: 5\r\n\r\norder"
	}
	return head + "\r\n"
}

// side sends GET path on a connection of its own (a primer or the blocker);
// with wait it reads the response and closes, else it returns the connection
// open (nil after an error).
func (r *matrixRig) side(c matrixCell, path string, wait bool) (net.Conn, error) {
	conn, err := r.dial(r.dest[c])
	if err != nil {
		return nil, err
	}
	if _, err := io.WriteString(conn, r.request(c, path, "GET")); err != nil {
		conn.Close()
		return nil, err
	}
	if !wait {
		return conn, nil
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		return nil, err
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		return nil, fmt.Errorf("%s: %d", path, resp.StatusCode)
	}
	return nil, nil
}

func awaitPath(ch chan string, path string, within time.Duration) bool {
	deadline := time.After(within)
	for {
		select {
		case p := <-ch:
			if p == path {
				return true
			}
		case <-deadline:
			return false
		}
	}
}

func awaitN(ch chan int, n int, within time.Duration) bool {
	deadline := time.After(within)
	for {
		select {
		case got := <-ch:
			if got == n {
				return true
			}
		case <-deadline:
			return false
		}
	}
}

// run plays a cell's scenario and reports what it observed.
func (r *matrixRig) run(c matrixCell) (got matrixGot) {
	u := r.cell[c]
	fail := func(err error) matrixGot {
		got.err = err.Error()
		got.arrivals = u.got()
		return got
	}
	unblock, err := r.arrangeWait(c)
	if err != nil {
		return fail(err)
	}
	defer unblock()
	conn, err := r.dial(r.dest[c])
	if err != nil {
		return fail(fmt.Errorf("dial: %w", err))
	}
	defer conn.Close()
	req := r.request(c, "/cell", string(c.method))
	if c.app == matrixPipelines || c.app == matrixPipelinesHangs {
		req += r.request(c, "/second", "GET")
	}
	sentAt := time.Now()
	if _, err := io.WriteString(conn, req); err != nil {
		return fail(fmt.Errorf("write: %w", err))
	}
	if c.app == matrixStays || c.app == matrixPipelines {
		u.releaseLater(matrixHangUpAt)
		if err := readTheAnswers(c, conn, sentAt, &got); err != nil {
			return fail(err)
		}
		time.Sleep(100 * time.Millisecond) // anything sent after the response would show
		got.arrivals = u.got()
		got.openStalls = u.awaitStallsClosed()
		return got
	}
	if err := u.hangUpAsScripted(conn, &got); err != nil {
		return fail(err)
	}
	// The app is gone: whatever the wait was, it is over after this.
	time.Sleep(c.waitLength() + time.Second)
	got.arrivals = u.got()
	got.openStalls = u.awaitStallsClosed()
	return got
}

// arrangeWait sets up the wait of c's cell before its request: a hold or a
// token is used up by a first request, a queue slot taken by a blocking
// one. unblock ends the blocking request.
func (r *matrixRig) arrangeWait(c matrixCell) (unblock func(), err error) {
	u := r.cell[c]
	switch c.wait {
	case matrixHold, matrixToken:
		if _, err := r.side(c, "/prime", true); err != nil {
			return nil, fmt.Errorf("priming the %s: %w", c.wait, err)
		}
	case matrixQueue:
		blocker, err := r.side(c, "/block", false)
		if err != nil {
			return nil, fmt.Errorf("taking the slot: %w", err)
		}
		if !awaitPath(u.arrived, "/block", 10*time.Second) {
			blocker.Close()
			return nil, errors.New("the blocking request never reached the upstream")
		}
		return func() { blocker.Close() }, nil
	}
	return func() {}, nil
}

// releaseLater lets the request that holds a queue's slot finish after d.
func (u *matrixUpstreamRig) releaseLater(d time.Duration) {
	if u.c.wait == matrixQueue {
		time.AfterFunc(d, func() { close(u.release) })
	}
}

// readTheAnswers reads, for an app that stays, the cell's response (and the
// pipelined second one) into got.
func readTheAnswers(c matrixCell, conn net.Conn, sentAt time.Time, got *matrixGot) error {
	_ = conn.SetDeadline(time.Now().Add(15 * time.Second))
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		return fmt.Errorf("reading the response: %w", err)
	}
	got.answeredAfter = time.Since(sentAt)
	io.Copy(io.Discard, resp.Body)
	got.status, got.outcome, got.count = resp.StatusCode, resp.Header.Get("X-Retry-Outcome"), resp.Header.Get("X-Retry-Attempts")
	if c.app == matrixPipelines {
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			return fmt.Errorf("reading the pipelined response: %w", err)
		}
		io.Copy(io.Discard, resp.Body)
		got.secondStatus, got.secondOutcome = resp.StatusCode, resp.Header.Get("X-Retry-Outcome")
	}
	return nil
}

// hangUpAsScripted closes the app's connection at the moment its cell
// names: before the first attempt, during the wait, or after the last
// attempt, and notes when in got.
func (u *matrixUpstreamRig) hangUpAsScripted(conn net.Conn, got *matrixGot) error {
	c, want := u.c, u.want
	hangUp := func() {
		conn.Close()
		got.hungUp = time.Now()
		close(u.appGone)
	}
	switch c.app {
	case matrixBefore:
		if want.waitsBeforeFirst {
			hangUp()
		} else {
			if !awaitPath(u.arrived, "/cell", 10*time.Second) {
				return errors.New("the first attempt never arrived")
			}
			hangUp()
		}
		u.releaseLater(matrixHangUpAt)
	case matrixDuring, matrixPipelinesHangs:
		if !want.waitsBeforeFirst && !awaitN(u.answered, 1, 10*time.Second) {
			return errors.New("the first attempt was never answered")
		}
		time.Sleep(matrixHangUpAt)
		if u.cells() != len(want.attempts) {
			return fmt.Errorf("the wait was over before the app hung up (a machine too slow for the scenario's %v)", c.waitLength())
		}
		hangUp()
		u.releaseLater(matrixHangUpAt)
	case matrixAfter:
		u.releaseLater(matrixHangUpAt)
		for range len(want.attempts) {
			if !awaitPath(u.arrived, "/cell", 10*time.Second) {
				return fmt.Errorf("attempt %d never arrived", len(want.attempts))
			}
		}
		hangUp()
	}
	return nil
}

// awaitStallsClosed gives the upstream's server up to a second to see the
// connections the sidecar closed, and returns the stalls still open.
func (u *matrixUpstreamRig) awaitStallsClosed() int {
	for end := time.Now().Add(time.Second); u.openStalls() > 0 && time.Now().Before(end); {
		time.Sleep(10 * time.Millisecond)
	}
	return u.openStalls()
}

// sinceHangUp says when path's arrivals came relative to the app's hang-up.
func (g matrixGot) sinceHangUp(path string) string {
	if g.hungUp.IsZero() {
		return ""
	}
	var at []string
	for _, a := range g.arrivals {
		if a.path == path || a.path == "/prime" {
			at = append(at, a.path+" "+a.at.Sub(g.hungUp).Round(time.Millisecond).String())
		}
	}
	return fmt.Sprintf(" (arrived at %s from the app's hang-up)", strings.Join(at, ", "))
}

// check compares a cell's observations with its expectation.
func (c matrixCell) check(t *testing.T, want matrixWant, got matrixGot) {
	t.Helper()
	if got.err != "" {
		t.Errorf("scenario: %s", got.err)
	}
	var cell, second []string
	for _, a := range got.arrivals {
		switch a.path {
		case "/cell":
			cell = append(cell, a.attempt)
		case "/second":
			second = append(second, a.attempt)
		default:
			continue
		}
		if wantTLS := c.up != matrixPlain; a.tls != wantTLS {
			t.Errorf("%s attempt %s arrived over TLS: %v, want %v", a.path, a.attempt, a.tls, wantTLS)
		}
		if wantProto := map[bool]string{true: "HTTP/2.0", false: "HTTP/1.1"}[c.up == matrixH2]; a.proto != wantProto {
			t.Errorf("%s attempt %s arrived as %s, want %s", a.path, a.attempt, a.proto, wantProto)
		}
	}
	if !slices.Equal(cell, want.attempts) {
		t.Errorf("the upstream saw attempts %q of the request, want %q%s", cell, want.attempts, got.sinceHangUp("/cell"))
	}
	if !slices.Equal(second, want.second) {
		t.Errorf("the upstream saw attempts %q of the pipelined request, want %q%s", second, want.second, got.sinceHangUp("/second"))
	}
	if got.status != want.status || got.outcome != want.outcome || got.count != want.count {
		t.Errorf("the app read %d, X-Retry-Outcome %q, X-Retry-Attempts %q; want %d, %q, %q",
			got.status, got.outcome, got.count, want.status, want.outcome, want.count)
	}
	if want.answeredWithin > 0 && got.answeredAfter > want.answeredWithin {
		t.Errorf("the app read the response head %v after its request, want within %v", got.answeredAfter, want.answeredWithin)
	}
	if got.openStalls != 0 {
		t.Errorf("%d stalled answers still open at the upstream: the sidecar never closed them", got.openStalls)
	}
	if got.secondStatus != want.secondStatus || got.secondOutcome != want.secondOutcome {
		t.Errorf("the app read %d, X-Retry-Outcome %q for the pipelined request; want %d, %q",
			got.secondStatus, got.secondOutcome, want.secondStatus, want.secondOutcome)
	}
}

// TestCombinationMatrix runs every cell. The transparent path needs root and
// network namespaces (as TestRealClientsTransparentInterception); without them
// its cells skip with the reason.
func TestCombinationMatrix(t *testing.T) {
	t.Parallel()
	ca := newTestCA(t, "matrix CA")
	cert := ca.leaf(t, "upstream.test")
	byPath := map[matrixPath][]matrixCell{}
	var all []matrixCell
	for _, c := range matrixCells() {
		all = append(all, c)
		if matrixExpect(c).skip == "" {
			byPath[c.path] = append(byPath[c.path], c)
		}
	}
	rigs := map[matrixPath]*matrixRig{}
	pathSkip := map[matrixPath]string{}
	for _, p := range matrixPaths {
		if p != matrixTransparent {
			rigs[p] = newForwardMatrixRig(t, p, byPath[p], ca, cert)
			continue
		}
		// Without root the forward paths still run (newNetns would skip them all).
		if why := matrixNetnsMissing(); why != "" {
			pathSkip[p] = why
			continue
		}
		rigs[p] = newTransparentMatrixRig(t, byPath[p], ca, cert)
	}

	start := time.Now()
	results := map[matrixCell]matrixGot{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, c := range all {
		r := rigs[c.path]
		if matrixExpect(c).skip != "" || r == nil {
			continue
		}
		wg.Go(func() {
			got := r.run(c)
			mu.Lock()
			results[c] = got
			mu.Unlock()
		})
	}
	wg.Wait()
	t.Logf("%d cells (%d run, %d skipped) in %v", len(all), len(results), len(all)-len(results), time.Since(start).Round(time.Millisecond))

	for _, c := range all {
		t.Run(c.String(), func(t *testing.T) {
			want := matrixExpect(c)
			if want.skip != "" {
				t.Skip(want.skip)
			}
			if why := pathSkip[c.path]; why != "" {
				t.Skip(why)
			}
			c.check(t, want, results[c])
		})
	}
}
