package h1server

import (
	"fmt"
	"net/http"
	"net/textproto"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"golang.org/x/net/http/httpguts"
)

// pendingSize is how much body a response holds back before committing its
// head: a handler that ends within it gets a Content-Length, a longer or
// flushed body goes chunked (net/http's bufferBeforeChunkingSize).
const pendingSize = 2048

// response is the http.ResponseWriter (and http.Flusher) of a request served
// here. It frames the body as net/http.Server does: the handler's
// Content-Length if it set one, a computed one for a short complete body,
// chunked otherwise, none for HEAD, 1xx, 204 and 304.
type response struct {
	c       *conn
	req     *http.Request
	body    *body // nil without one
	header  http.Header
	status  int  // 0 until WriteHeader
	head    bool // the status line and header are in c.bw
	chunked bool
	close   bool  // Connection: close, and the connection ends after
	length  int64 // declared Content-Length, -1 if none
	written int64
	failed  error // the first write error: the app is gone
	pending []byte
	store   [pendingSize]byte
}

func (w *response) reset(c *conn, req *http.Request, b *body) {
	h := w.header
	if h == nil {
		h = make(http.Header, 8)
	} else {
		clear(h)
	}
	// Field by field: the 2 KiB store is overwritten as it is used, never zeroed.
	w.c, w.req, w.body, w.header = c, req, b, h
	w.status, w.head, w.chunked, w.close = 0, false, false, req.Close
	w.length, w.written, w.failed = -1, 0, nil
	w.pending = w.store[:0]
}

func (w *response) Header() http.Header { return w.header }

func (w *response) WriteHeader(code int) {
	if w.status != 0 {
		return // superfluous, as net/http (which logs it)
	}
	if code < 100 || code > 999 {
		panic(fmt.Sprintf("invalid WriteHeader code %v", code))
	}
	if code >= 100 && code <= 199 && code != http.StatusSwitchingProtocols {
		w.informational(code)
		return
	}
	w.status = code
	if cl, ok := w.header["Content-Length"]; ok && len(cl) > 0 {
		if n, err := strconv.ParseInt(strings.TrimSpace(cl[0]), 10, 64); err == nil && n >= 0 {
			w.length = n
		} else {
			delete(w.header, "Content-Length") // as net/http: an invalid value is dropped
		}
	}
}

// informational writes a 1xx response at once; the final one follows.
func (w *response) informational(code int) {
	w.writeStatusLine(code)
	w.writeFields()
	w.c.bw.WriteString("\r\n")
	if err := w.c.bw.Flush(); err != nil && w.failed == nil {
		w.failed = err
	}
}

func (w *response) Write(p []byte) (int, error) {
	if w.status == 0 {
		w.WriteHeader(http.StatusOK)
	}
	if w.failed != nil {
		return 0, w.failed
	}
	if !statusHasBody(w.status) {
		return 0, http.ErrBodyNotAllowed
	}
	if w.length >= 0 && w.written+int64(len(p)) > w.length {
		return 0, http.ErrContentLength
	}
	w.written += int64(len(p))
	if !w.head && len(w.pending)+len(p) <= cap(w.pending) {
		w.pending = append(w.pending, p...) // for HEAD too: it may decide the Content-Length
		return len(p), nil
	}
	w.commit(false)
	w.writeBody(w.pending)
	w.pending = w.pending[:0]
	w.writeBody(p)
	if w.failed != nil {
		return 0, w.failed
	}
	return len(p), nil
}

// Flush sends the head and every body byte written so far.
func (w *response) Flush() {
	if w.status == 0 {
		w.WriteHeader(http.StatusOK)
	}
	w.commit(false)
	w.writeBody(w.pending)
	w.pending = w.pending[:0]
	if err := w.c.bw.Flush(); err != nil && w.failed == nil {
		w.failed = err
	}
}

// FlushError is Flush reporting the first write error (http.ResponseController).
func (w *response) FlushError() error {
	w.Flush()
	return w.failed
}

// finish completes the response after the handler returned: the head (with a
// computed Content-Length if the whole body is pending), the body, the last
// chunk and trailers, then one flush.
func (w *response) finish() {
	if w.status == 0 {
		w.WriteHeader(http.StatusOK)
	}
	w.commit(true)
	w.writeBody(w.pending)
	if w.chunked {
		w.c.bw.WriteString("0\r\n")
		w.writeTrailers()
		w.c.bw.WriteString("\r\n")
	}
	if w.length >= 0 && w.written < w.length && w.bodyAllowed() && w.failed == nil {
		w.close = true // the app's client waits for bytes that will not come
	}
	if err := w.c.bw.Flush(); err != nil && w.failed == nil {
		w.failed = err
	}
}

func (w *response) keepAlive() bool { return !w.close && w.failed == nil }

// bodyAllowed: body bytes go on the wire.
func (w *response) bodyAllowed() bool {
	return w.req.Method != http.MethodHead && statusHasBody(w.status)
}

// statusHasBody: 1xx, 204 and 304 responses have no body (RFC 9110 §6.4.1).
func statusHasBody(code int) bool {
	return code >= 200 && code != http.StatusNoContent && code != http.StatusNotModified
}

// commit writes the status line and header once, choosing the framing.
func (w *response) commit(done bool) {
	if w.head {
		return
	}
	w.head = true
	h := w.header
	if httpguts.HeaderValuesContainsToken(h["Connection"], "close") {
		w.close = true
	}
	if w.c.srv.shutdown.Load() || w.body != nil && w.body.unread.Load() > maxDiscard {
		w.close = true // a long unread request body is not drained: the connection ends
	}
	isHEAD := w.req.Method == http.MethodHead
	switch {
	case !statusHasBody(w.status):
		delete(h, "Transfer-Encoding")
		delete(h, "Content-Length")
		if w.status == http.StatusNotModified {
			delete(h, "Content-Type") // RFC 9110 §15.4.5: no representation metadata
		}
	case w.length >= 0:
	case done && len(h["Trailer"]) == 0 && (!isHEAD || len(w.pending) > 0):
		w.length = int64(len(w.pending))
		h["Content-Length"] = []string{strconv.Itoa(len(w.pending))}
	case isHEAD:
	default:
		w.chunked = true
		h["Transfer-Encoding"] = []string{"chunked"}
	}
	if _, ok := h["Content-Type"]; !ok && statusHasBody(w.status) && len(w.pending) > 0 {
		h["Content-Type"] = []string{http.DetectContentType(w.pending)}
	}
	if _, ok := h["Date"]; !ok {
		h["Date"] = []string{httpDate()}
	}
	if w.close && !httpguts.HeaderValuesContainsToken(h["Connection"], "close") {
		h["Connection"] = []string{"close"}
	}
	w.writeStatusLine(w.status)
	w.writeFields()
	w.c.bw.WriteString("\r\n")
}

func (w *response) writeStatusLine(code int) {
	bw := w.c.bw
	bw.WriteString("HTTP/1.1 ")
	bw.WriteString(strconv.Itoa(code))
	bw.WriteByte(' ')
	if text := http.StatusText(code); text != "" {
		bw.WriteString(text)
	} else {
		bw.WriteString("status code ")
		bw.WriteString(strconv.Itoa(code))
	}
	bw.WriteString("\r\n")
}

// writeFields writes the header fields with valid names; a CR or LF in a
// value becomes a space, as net/http writes them.
func (w *response) writeFields() {
	trailers := trailerKeys(w.header)
	for k, vv := range w.header {
		if httpguts.ValidHeaderFieldName(k) && !slices.Contains(trailers, k) {
			w.writeField(k, vv)
		}
	}
}

// writeField writes "k: v" lines, one per value; a CR or LF in a value
// becomes a space, as net/http writes them.
func (w *response) writeField(k string, vv []string) {
	bw := w.c.bw
	for _, v := range vv {
		v = textproto.TrimString(v)
		if strings.ContainsAny(v, "\r\n") {
			v = newlineToSpace.Replace(v)
		}
		bw.WriteString(k)
		bw.WriteString(": ")
		bw.WriteString(v)
		bw.WriteString("\r\n")
	}
}

var newlineToSpace = strings.NewReplacer("\r", " ", "\n", " ")

// writeBody writes body bytes after the head, as a chunk if chunked.
func (w *response) writeBody(p []byte) {
	if len(p) == 0 || w.failed != nil || !w.bodyAllowed() {
		return
	}
	bw := w.c.bw
	if w.chunked {
		bw.WriteString(strconv.FormatInt(int64(len(p)), 16))
		bw.WriteString("\r\n")
	}
	_, err := bw.Write(p)
	if w.chunked && err == nil {
		_, err = bw.WriteString("\r\n")
	}
	if err != nil {
		w.failed = err
	}
}

// writeTrailers writes the fields the handler declared in its Trailer header
// and set after the body.
func (w *response) writeTrailers() {
	for _, k := range trailerKeys(w.header) {
		w.writeField(k, w.header[k])
	}
}

// trailerKeys are the valid field names the Trailer values declare,
// canonicalised: they are sent after the body, not in the head.
func trailerKeys(h http.Header) []string {
	var keys []string
	for _, decl := range h["Trailer"] {
		for _, k := range strings.Split(decl, ",") {
			if k = textproto.CanonicalMIMEHeaderKey(textproto.TrimString(k)); httpguts.ValidHeaderFieldName(k) {
				keys = append(keys, k)
			}
		}
	}
	return keys
}

// httpDate is the Date header value, formatted once per second.
func httpDate() string {
	now := time.Now().Unix()
	if d := dateCache.Load(); d != nil && d.unix == now {
		return d.text
	}
	d := &cachedDate{unix: now, text: time.Unix(now, 0).UTC().Format(http.TimeFormat)}
	dateCache.Store(d)
	return d.text
}

type cachedDate struct {
	unix int64
	text string
}

var dateCache atomic.Pointer[cachedDate]
