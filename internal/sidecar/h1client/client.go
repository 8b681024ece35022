// Package h1client is a small HTTP/1.1 client for plain http:// upstreams on a
// keep-alive connection pool. Unlike net/http.Transport it writes the request
// and reads the response on the caller's goroutine: there is no writeLoop /
// readLoop per connection and no channel hand-off per request, which is most of
// what a forward proxy pays for on loopback.
//
// RoundTripTLS sends an http:// request of the app to a TLS upstream (TLS
// origination, docs/tls.md): HTTP/1.1 on this pool, HTTP/2 when the upstream
// selects it by ALPN; the contract below holds for it too (tls.go).
//
// Anything it does not handle itself goes to Fallback (normally an
// *http.Transport): https, CONNECT, upgrades, Expect: 100-continue, request
// trailers, URL user info, and request bodies of unknown or large length (those
// need the request written concurrently with the response being read, which is
// exactly what net/http's writeLoop is for).
//
// Contract (docs/sidecar.md, "What the app can rely on"), relied upon by
// pkg/retrypolicy, which counts every transmission as an attempt:
//   - a connect failure is returned as the dialer's error (a *net.OpError with
//     Op "dial", or a *net.DNSError), so it is distinguishable from a failure
//     after the request was written; a failed TLS handshake is one too, except
//     a certificate that does not verify: retryhttp.ErrUntrustedCertificate;
//   - a request is never sent twice. The sole exception: on a reused connection
//     where not one byte of the request reached the socket, it goes out on
//     another connection as the same transmission (with its body produced again
//     by GetBody, or no body). Which requests are replayable is the retry
//     policy's business alone; no header name is treated as "safe" here;
//   - a pooled connection is checked (a non-blocking peek) before every reuse: a
//     connection the server closed while idle, or one holding unsolicited bytes,
//     is discarded, never written to;
//   - bytes never cross between exchanges: a connection with unread bytes after
//     a response, or after any framing error, is closed, never reused;
//   - a status outside 100–999 or a malformed head is ErrMalformedResponse;
//   - an answer the server sent before reading the whole request body (a 413,
//     say) is returned, not replaced by the write error;
//   - the request body is always closed; cancellation and deadlines of the
//     request's context abort dialing, writing, and reading headers and body.
//
// Fallback requests are sent so that net/http.Transport cannot resend them on
// its own either: requests with a body go without GetBody (net/http then never
// replays them), body-less ones on a transport without keep-alive (net/http
// replays only on reused connections).
package h1client

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/retrydev/retry-operator/pkg/retrypolicy/retryhttp"
	"golang.org/x/net/http/httpguts"
)

// DefaultMaxSyncBodyBytes is the largest request body (with a known length)
// written on the caller's goroutine before the response is read.
const DefaultMaxSyncBodyBytes = 64 << 10

// maxDrain bounds how much of an unread response body Close reads to keep the
// connection; a longer rest closes the connection instead.
const maxDrain = 16 << 10

// Transport is an http.RoundTripper for HTTP/1.1 over plain TCP. The zero value
// is not usable: set Dial (or leave it nil for a default net.Dialer).
type Transport struct {
	// DialContext opens upstream connections; nil means a net.Dialer with a 30 s timeout.
	DialContext func(ctx context.Context, network, addr string) (net.Conn, error)
	// Fallback sends the requests with a body that this client does not handle
	// (see the package doc); it is given them without GetBody, so an
	// *http.Transport never replays them. FallbackNoReuse sends the body-less
	// ones: it must not reuse connections (an *http.Transport with
	// DisableKeepAlives), because net/http replays body-less requests on its own
	// when a reused connection dies. nil means such requests are an error, except
	// large or chunked bodies, which are then written synchronously.
	Fallback        http.RoundTripper
	FallbackNoReuse http.RoundTripper

	MaxIdleConns        int           // all hosts; 0 = unlimited
	MaxIdleConnsPerHost int           // 0 = 2, as net/http
	MaxConnsPerHost     int           // dialing + active + idle; 0 = unlimited
	IdleConnTimeout     time.Duration // 0 = no limit

	// MaxSyncBodyBytes: request bodies longer than this, or of unknown length,
	// go to Fallback when it is set. 0 = DefaultMaxSyncBodyBytes.
	MaxSyncBodyBytes int64
	// ReadBufferSize and WriteBufferSize of each connection; 0 = 8 KiB / 4 KiB.
	ReadBufferSize, WriteBufferSize int
	// MaxResponseHeaderBytes bounds the response head; 0 = 1 MiB.
	MaxResponseHeaderBytes int64

	// TLSDialTimeout bounds the TCP connect and the TLS handshake of
	// RoundTripTLS together; 0 = DefaultTLSDialTimeout.
	TLSDialTimeout time.Duration
	// DisableHTTP2 offers only http/1.1 by ALPN to TLS upstreams.
	DisableHTTP2 bool

	// HandOffAll sends every request RoundTrip is given to Fallback, under
	// the same rule: net/http cannot resend it on its own (the sidecar's
	// --http1-upstream-client=false, docs/performance.md#the-upstream-client).
	// Body-less requests of the methods that usually have no body go on
	// Fallback's pooled connections, with an empty body that net/http drops
	// before writing and that makes it see them as not replayable; other
	// body-less ones on FallbackNoReuse. RoundTripTLS is not affected.
	HandOffAll bool

	mu        sync.Mutex
	hosts     map[string]*host
	h2conns   map[string][]*http.ClientConn // TLS upstreams that chose HTTP/2, by TLSOrigin.Key
	h2t       *http.Transport
	idleTotal int
	janitor   *time.Timer
	closed    bool

	wpool sync.Pool
}

// host is the pool of one upstream authority.
type host struct {
	idle    []*conn // LIFO: the most recently used is the most likely alive
	total   int     // dialing + in use + idle
	waiters []chan *conn
}

// conn is one upstream connection. Its reader is bound to it for life: bytes
// the server sent past a response must not be lost nor handed to another
// connection.
type conn struct {
	t      *Transport
	key    string
	nc     net.Conn
	cr     countingConn
	br     *bufio.Reader
	idleAt time.Time
	reused bool
	// h2: the dial negotiated HTTP/2; the connection lives in the HTTP/2 pool
	// and this value only carries it to the caller (nc, cr, br are unused).
	h2 *http.ClientConn
}

// countingConn counts the bytes of the current exchange, so a failure can tell
// "nothing was written" and "no response byte was read".
type countingConn struct {
	net.Conn
	nread, nwritten int64
	limit           int64 // while reading a response head: bound on nread
}

var errHeaderTooLarge = errors.New("h1client: response header too large")

func (c *countingConn) Read(p []byte) (int, error) {
	if c.limit > 0 && c.nread >= c.limit {
		return 0, errHeaderTooLarge
	}
	n, err := c.Conn.Read(p)
	c.nread += int64(n)
	return n, err
}

func (c *countingConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	c.nwritten += int64(n)
	return n, err
}

var errClosed = errors.New("h1client: transport closed")

// errUnsupported marks requests for Fallback.
var errUnsupported = errors.New("h1client: request needs the fallback transport")

// RoundTrip implements http.RoundTripper.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	if t.HandOffAll {
		return t.fallback(bodyless(req))
	}
	if !t.handles(req) {
		return t.fallback(req)
	}
	if err := validate(req); err != nil {
		closeBody(req)
		return nil, err
	}
	return t.roundTripPooled(req, hostPort(req.URL), nil)
}

// roundTripPooled sends req on a pooled connection of key (dialled as o says
// when o is not nil), resending only what never reached a socket.
func (t *Transport) roundTripPooled(req *http.Request, key string, o *TLSOrigin) (*http.Response, error) {
	ctx := req.Context()
	body := req.Body
	if body == http.NoBody {
		body = nil
	}
	canResend := body == nil || req.GetBody != nil
	for try := 0; ; try++ {
		c, err := t.getConn(ctx, key, o)
		if err != nil {
			if body != nil {
				body.Close()
			}
			return nil, err
		}
		if c.h2 != nil {
			if try > 0 && body != nil {
				b, gerr := req.GetBody()
				if gerr != nil {
					c.h2.Release()
					return nil, gerr
				}
				r := req.WithContext(ctx)
				r.Body = b
				req = r
			}
			return roundTripH2(c.h2, req)
		}
		if try > 0 && body != nil { // a resend: a fresh body
			b, gerr := req.GetBody()
			if gerr != nil {
				t.discard(c)
				return nil, gerr
			}
			body = b
		}
		resp, err := c.roundTrip(ctx, req, body) // closes body on error
		if err == nil {
			return resp, nil
		}
		// The one resend: not one byte of this request reached the socket of a
		// reused connection (it died between the liveness check and the write).
		// The server cannot have seen it, so it is the same transmission.
		retry := c.reused && c.cr.nwritten == 0 && canResend && ctx.Err() == nil && try < maxNothingWrittenResends
		t.discard(c)
		if !retry {
			return nil, err
		}
	}
}

// maxNothingWrittenResends bounds the resends of a request none of whose bytes
// were written (each consumes one dead pooled connection).
const maxNothingWrittenResends = 4

// fallback sends a request this client does not handle, so that net/http
// cannot resend it on its own (see Fallback).
func (t *Transport) fallback(req *http.Request) (*http.Response, error) {
	rt := t.Fallback
	hasBody := req.Body != nil && req.Body != http.NoBody
	if !hasBody {
		rt = t.FallbackNoReuse
	}
	if rt == nil {
		closeBody(req)
		return nil, fmt.Errorf("%w: %s %s", errUnsupported, req.Method, req.URL.Scheme)
	}
	out := req
	if req.GetBody != nil {
		out = req.Clone(req.Context())
		out.Body = req.Body
		out.GetBody = nil
	}
	if _, ok := req.Header["User-Agent"]; !ok {
		// net/http would add its own User-Agent; the upstream gets what the app sent.
		if out == req {
			out = req.Clone(req.Context())
			out.Body = req.Body
		}
		out.Header["User-Agent"] = []string{""}
	}
	return rt.RoundTrip(out)
}

// bodyless gives a request without a body of a method that usually has none
// an empty body (HandOffAll): net/http writes it as it writes no body (it
// reads the body's first byte and, at its end, drops it) but no longer counts
// the request replayable, so fallback sends it on a pooled connection that
// net/http cannot resend it on. Other requests are returned as they are.
func bodyless(req *http.Request) *http.Request {
	if req.Body != nil && req.Body != http.NoBody {
		return req
	}
	switch req.Method {
	case http.MethodGet, http.MethodHead, http.MethodDelete, http.MethodOptions:
	default:
		return req
	}
	out := req.Clone(req.Context())
	out.Body, out.GetBody, out.ContentLength = emptyBody{}, nil, 0
	return out
}

// emptyBody is a request body at its end: not http.NoBody, which net/http
// takes for no body at all.
type emptyBody struct{}

func (emptyBody) Read([]byte) (int, error) { return 0, io.EOF }
func (emptyBody) Close() error             { return nil }

// handles reports whether the request is for this client.
func (t *Transport) handles(req *http.Request) bool {
	u := req.URL
	if u == nil || u.Scheme != "http" || u.Host == "" || u.User != nil || req.Method == http.MethodConnect {
		return false
	}
	if len(req.Trailer) > 0 {
		return false
	}
	h := req.Header
	if len(h["Upgrade"]) > 0 || len(h["Expect"]) > 0 {
		return false
	}
	if req.Body != nil && req.Body != http.NoBody && t.Fallback != nil {
		limit := t.MaxSyncBodyBytes
		if limit == 0 {
			limit = DefaultMaxSyncBodyBytes
		}
		if req.ContentLength <= 0 || req.ContentLength > limit {
			return false
		}
	}
	return true
}

func validate(req *http.Request) error {
	if !validMethod(req.Method) {
		return fmt.Errorf("h1client: invalid method %q", req.Method)
	}
	host := req.Host
	if host == "" {
		host = req.URL.Host
	}
	if !validValue(host) || strings.ContainsAny(host, " \t") {
		return fmt.Errorf("h1client: invalid Host %q", host)
	}
	for k, vv := range req.Header {
		if !httpguts.ValidHeaderFieldName(k) {
			return fmt.Errorf("h1client: invalid header field name %q", k)
		}
		for _, v := range vv {
			if !validValue(v) {
				return fmt.Errorf("h1client: invalid header field value for %q", k)
			}
		}
	}
	return nil
}

func validMethod(m string) bool {
	if m == "" {
		return true
	}
	return httpguts.ValidHeaderFieldName(m)
}

func validValue(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; (c < ' ' && c != '\t') || c == 0x7f {
			return false
		}
	}
	return true
}

func closeBody(req *http.Request) {
	if req.Body != nil {
		req.Body.Close()
	}
}

// hostPort is the pool key and dial address: host:port with the default port
// made explicit.
func hostPort(u *url.URL) string {
	h := u.Host
	if i := strings.LastIndexByte(h, ':'); i >= 0 && strings.IndexByte(h[i:], ']') < 0 {
		if i == len(h)-1 { // "host:" means the default port
			return h + "80"
		}
		return h
	}
	return net.JoinHostPort(strings.Trim(h, "[]"), "80")
}

// roundTrip sends one request on c and reads the response head.
func (c *conn) roundTrip(ctx context.Context, req *http.Request, body io.ReadCloser) (resp *http.Response, err error) {
	t := c.t
	c.cr.nread, c.cr.nwritten = 0, 0
	var stop func() bool
	if ctx.Done() != nil {
		if err := ctx.Err(); err != nil {
			if body != nil {
				body.Close()
			}
			return nil, err
		}
		nc := c.nc
		stop = context.AfterFunc(ctx, func() { nc.SetDeadline(aLongTimeAgo) })
	}
	fail := func(err error) (*http.Response, error) {
		c.cr.limit = 0
		if body != nil {
			body.Close()
		}
		if stop != nil {
			stop()
		}
		if cerr := ctx.Err(); cerr != nil {
			return nil, cerr
		}
		return nil, err
	}

	w := t.getWriter(&c.cr)
	closeConn := req.Close || httpguts.HeaderValuesContainsToken(req.Header["Connection"], "close")
	err = writeHead(w, req, body, closeConn)
	if err == nil && body != nil {
		err = writeBody(w, req, body)
	}
	if err == nil {
		err = w.Flush()
	}
	t.putWriter(w)
	writeErr := err
	if body != nil {
		body.Close()
		body = nil
	}
	if writeErr != nil {
		if c.cr.nwritten == 0 || ctx.Err() != nil {
			return fail(writeErr)
		}
		// The server may have answered before reading the whole body (a 413,
		// say) and closed: its answer, if it came, is the response.
		c.nc.SetReadDeadline(time.Now().Add(earlyAnswerWait))
	}

	c.cr.limit = t.maxHeader()
	resp, err = readFinalResponse(c.br, req)
	if err != nil {
		if writeErr != nil {
			return fail(writeErr)
		}
		return fail(err)
	}
	c.cr.limit = 0
	reuse := writeErr == nil && !closeConn && !resp.Close
	if writeErr != nil {
		c.nc.SetReadDeadline(time.Time{})
	}
	if resp.Body == http.NoBody {
		c.release(stop, reuse)
		return resp, nil
	}
	resp.Body = &bodyReader{rc: resp.Body, c: c, ctx: ctx, stop: stop, reuse: reuse}
	return resp, nil
}

// earlyAnswerWait bounds the wait for a response after the request body could
// not be written completely.
const earlyAnswerWait = time.Second

// ErrMalformedResponse is retryhttp.ErrMalformedResponse: the upstream's
// response head cannot be relayed (bad syntax, a status outside 100–999, an
// unasked-for 101, too many 1xx, a head past MaxResponseHeaderBytes).
var ErrMalformedResponse = retryhttp.ErrMalformedResponse

// readFinalResponse reads response heads until a final one (1xx are skipped).
func readFinalResponse(br *bufio.Reader, req *http.Request) (*http.Response, error) {
	for n := 0; ; n++ {
		resp, err := readResponse(br, req)
		if err != nil {
			return nil, err
		}
		switch code := resp.StatusCode; {
		case code < 100 || code > 999:
			return nil, fmt.Errorf("%w: status %d", ErrMalformedResponse, code)
		case code == http.StatusSwitchingProtocols:
			// Never asked for: Upgrade requests go to the fallback.
			return nil, fmt.Errorf("%w: unrequested 101", ErrMalformedResponse)
		case code < 200:
			if n >= 10 {
				return nil, fmt.Errorf("%w: too many 1xx responses", ErrMalformedResponse)
			}
			continue
		}
		return resp, nil
	}
}

// readResponse reads a response head, bounding its size. A connection that
// ends or fails is a transport error; bytes that are not a response are
// ErrMalformedResponse.
func readResponse(br *bufio.Reader, req *http.Request) (*http.Response, error) {
	resp, err := http.ReadResponse(br, req)
	if err == nil {
		return resp, nil
	}
	var ne net.Error
	switch {
	case errors.Is(err, io.EOF):
		return nil, io.ErrUnexpectedEOF
	case errors.Is(err, io.ErrUnexpectedEOF), errors.As(err, &ne):
		return nil, err
	case errors.Is(err, errHeaderTooLarge):
		return nil, fmt.Errorf("%w: %w", ErrMalformedResponse, err)
	}
	var se syscall.Errno
	if errors.As(err, &se) {
		return nil, err
	}
	return nil, fmt.Errorf("%w: %w", ErrMalformedResponse, err)
}

var aLongTimeAgo = time.Unix(1, 0)

func (t *Transport) maxHeader() int64 {
	if t.MaxResponseHeaderBytes > 0 {
		return t.MaxResponseHeaderBytes
	}
	return 1 << 20
}

// writeHead writes the request line and header.
func writeHead(w *bufio.Writer, req *http.Request, body io.ReadCloser, closeConn bool) error {
	method := req.Method
	if method == "" {
		method = http.MethodGet
	}
	w.WriteString(method)
	w.WriteByte(' ')
	uri := req.URL.RequestURI()
	w.WriteString(uri)
	w.WriteString(" HTTP/1.1\r\nHost: ")
	host := req.Host
	if host == "" {
		host = req.URL.Host
	}
	w.WriteString(host)
	w.WriteString("\r\n")
	switch {
	case body == nil:
		if req.ContentLength == 0 && (method == http.MethodPost || method == http.MethodPut || method == http.MethodPatch) {
			w.WriteString("Content-Length: 0\r\n")
		}
	case req.ContentLength > 0:
		w.WriteString("Content-Length: ")
		var b [20]byte
		w.Write(strconv.AppendInt(b[:0], req.ContentLength, 10))
		w.WriteString("\r\n")
	default:
		w.WriteString("Transfer-Encoding: chunked\r\n")
	}
	if closeConn {
		if _, ok := req.Header["Connection"]; !ok {
			w.WriteString("Connection: close\r\n")
		}
	}
	for k, vv := range req.Header {
		switch k {
		case "Host", "User-Agent", "Content-Length", "Transfer-Encoding", "Trailer":
			if k != "User-Agent" {
				continue
			}
			if len(vv) == 0 || vv[0] == "" {
				continue // an empty User-Agent means "send none", as net/http
			}
		}
		for _, v := range vv {
			w.WriteString(k)
			w.WriteString(": ")
			w.WriteString(strings.TrimSpace(v))
			w.WriteString("\r\n")
		}
	}
	_, err := w.WriteString("\r\n")
	return err
}

// writeBody writes a body of known length (exactly ContentLength bytes) or a
// chunked one. The caller closes the body.
func writeBody(w *bufio.Writer, req *http.Request, body io.ReadCloser) error {
	if req.ContentLength > 0 {
		n, err := io.CopyN(w, body, req.ContentLength)
		if errors.Is(err, io.EOF) {
			err = fmt.Errorf("h1client: ContentLength=%d with Body length %d", req.ContentLength, n)
		}
		return err
	}
	cw := chunkedWriter{w: w}
	if _, err := io.Copy(&cw, body); err != nil {
		return err
	}
	_, err := w.WriteString("0\r\n\r\n")
	return err
}

type chunkedWriter struct{ w *bufio.Writer }

func (c *chunkedWriter) Write(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	var b [16]byte
	c.w.Write(strconv.AppendInt(b[:0], int64(len(p)), 16))
	c.w.WriteString("\r\n")
	c.w.Write(p)
	_, err := c.w.WriteString("\r\n")
	if err != nil {
		return 0, err
	}
	return len(p), nil
}

func (t *Transport) getWriter(w io.Writer) *bufio.Writer {
	if bw, ok := t.wpool.Get().(*bufio.Writer); ok {
		bw.Reset(w)
		return bw
	}
	size := t.WriteBufferSize
	if size <= 0 {
		size = 4 << 10
	}
	return bufio.NewWriterSize(w, size)
}

func (t *Transport) putWriter(w *bufio.Writer) {
	w.Reset(nil)
	t.wpool.Put(w)
}

// bodyReader is the response body: it gives the connection back to the pool
// when the body reaches EOF (or is closed after a short, bounded drain).
type bodyReader struct {
	rc    io.ReadCloser
	c     *conn
	ctx   context.Context
	stop  func() bool
	reuse bool
	mu    sync.Mutex
	done  bool
	err   error
}

func (b *bodyReader) Read(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.done {
		if b.err != nil {
			return 0, b.err
		}
		return 0, io.EOF
	}
	n, err := b.rc.Read(p)
	if errors.Is(err, io.EOF) {
		b.finish(true)
		return n, io.EOF
	}
	if err != nil {
		if cerr := b.ctx.Err(); cerr != nil {
			err = cerr
		}
		b.err = err
		b.finish(false)
	}
	return n, err
}

func (b *bodyReader) Close() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.done {
		return nil
	}
	ok := false
	if b.reuse && b.ctx.Err() == nil {
		// A small rest (typically already buffered) is read so the connection can be reused.
		b.c.nc.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
		n, err := io.CopyN(io.Discard, b.rc, maxDrain+1)
		ok = errors.Is(err, io.EOF) && n <= maxDrain
		if ok {
			b.c.nc.SetReadDeadline(time.Time{})
		}
	}
	b.err = errors.New("h1client: read on closed response body")
	b.finish(ok)
	return nil
}

// finish ends the exchange; the connection goes back to the pool only if the
// whole response was read and nothing else can touch it.
func (b *bodyReader) finish(ok bool) {
	b.done = true
	b.c.release(b.stop, ok && b.reuse)
}

// release ends an exchange on c: back to the idle pool if reusable and the
// context watcher had not fired, closed otherwise.
func (c *conn) release(stop func() bool, reuse bool) {
	if stop != nil && !stop() {
		reuse = false // the watcher ran (or runs): the deadline is poisoned
	}
	if reuse && c.br.Buffered() > 0 {
		reuse = false // the server sent more than one response
	}
	if !reuse {
		c.t.discard(c)
		return
	}
	c.t.putIdle(c)
}
