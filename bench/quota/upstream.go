package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

const bucket = 10 * time.Millisecond

// upstream is a minimal HTTP/1.1 server on 127.0.0.1 (keep-alive, bodiless
// GETs: what the sidecars send here) that answers 200 and counts the
// requests arriving per 10 ms bucket from the start of the load (warm-up
// included). It is written on the raw
// connection, not net/http, so that on a loaded 2-CPU machine the counter
// costs the fleet under test as little CPU as possible.
type upstream struct {
	host  string // 127.0.0.1:port
	start atomic.Int64
	warm  time.Duration // from start to the measured run's start
	b     []atomic.Int64
	l     net.Listener
	mu    sync.Mutex
	conns map[net.Conn]struct{}
}

var okResponse = []byte("HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")

func startUpstream(slots int) (*upstream, error) {
	l, err := (&net.ListenConfig{}).Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	u := &upstream{host: l.Addr().String(), b: make([]atomic.Int64, slots), l: l, conns: map[net.Conn]struct{}{}}
	go u.accept()
	return u, nil
}

func (u *upstream) accept() {
	for {
		c, err := u.l.Accept()
		if errors.Is(err, net.ErrClosed) {
			return
		}
		if err != nil { // out of file descriptors in an overloaded run: try again
			time.Sleep(5 * time.Millisecond)
			continue
		}
		u.mu.Lock()
		u.conns[c] = struct{}{}
		u.mu.Unlock()
		go u.serve(c)
	}
}

// serve answers each request on c: the header ends at an empty line.
func (u *upstream) serve(c net.Conn) {
	defer func() {
		c.Close()
		u.mu.Lock()
		delete(u.conns, c)
		u.mu.Unlock()
	}()
	r := bufio.NewReaderSize(c, 4096)
	for {
		line, err := r.ReadSlice('\n')
		if err != nil {
			return
		}
		if len(bytes.TrimRight(line, "\r\n")) > 0 {
			continue
		}
		u.count()
		if _, err := c.Write(okResponse); err != nil {
			return
		}
	}
}

func (u *upstream) count() {
	if s := u.start.Load(); s != 0 {
		if i := (time.Now().UnixNano() - s) / int64(bucket); i >= 0 && i < int64(len(u.b)) {
			u.b[i].Add(1)
		}
	}
}

func (u *upstream) close() {
	u.l.Close()
	u.mu.Lock()
	for c := range u.conns {
		c.Close()
	}
	u.mu.Unlock()
}

// reset zeroes the counts and counts from begin on, the load's start; the
// times sum takes are from begin + warm, the measured run's start (negative:
// in the warm-up).
func (u *upstream) reset(begin time.Time, warm time.Duration) {
	for i := range u.b {
		u.b[i].Store(0)
	}
	u.warm = warm
	u.start.Store(begin.UnixNano())
}

// sum is the arrivals in [from, to) of the measured run, and the most in any
// 1 s window inside (sliding in 10 ms steps).
func (u *upstream) sum(from, to time.Duration) (int, int) {
	lo, hi := max(int((from+u.warm)/bucket), 0), min(int((to+u.warm)/bucket), len(u.b))
	win := int(time.Second / bucket)
	total, run, most := 0, 0, 0
	for i := lo; i < hi; i++ {
		n := int(u.b[i].Load())
		total += n
		run += n
		if i-lo >= win {
			run -= int(u.b[i-win].Load())
		}
		most = max(most, run)
	}
	return total, most
}

// perSecond is the arrivals in each whole second of the warm-up and of the
// measured run until to.
func (u *upstream) perSecond(to time.Duration) []int {
	var out []int
	for from := -u.warm; from+time.Second <= to; from += time.Second {
		n, _ := u.sum(from, from+time.Second)
		out = append(out, n)
	}
	return out
}
