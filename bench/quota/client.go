package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"strconv"
	"sync"
	"time"
)

// proxyClient sends bodiless GETs through one sidecar's forward proxy on
// keep-alive connections of its own: a minimal HTTP/1.1 client, not
// net/http, so the load generator costs the machine little (see upstream).
type proxyClient struct {
	addr string
	mu   sync.Mutex
	idle []*proxyConn
}

type proxyConn struct {
	c net.Conn
	r *bufio.Reader
}

// get sends GET url (absolute, as to a proxy) for host and returns the
// response's status.
func (p *proxyClient) get(url, host string) (int, error) {
	c, err := p.conn()
	if err != nil {
		return 0, err
	}
	_ = c.c.SetDeadline(time.Now().Add(10 * time.Second))
	status, keep, err := c.roundTrip(url, host)
	if err != nil || !keep {
		c.c.Close()
		return status, err
	}
	p.mu.Lock()
	p.idle = append(p.idle, c)
	p.mu.Unlock()
	return status, nil
}

func (p *proxyClient) conn() (*proxyConn, error) {
	p.mu.Lock()
	if n := len(p.idle); n > 0 {
		c := p.idle[n-1]
		p.idle = p.idle[:n-1]
		p.mu.Unlock()
		return c, nil
	}
	p.mu.Unlock()
	c, err := (&net.Dialer{}).DialContext(context.Background(), "tcp", p.addr)
	if err != nil {
		return nil, err
	}
	return &proxyConn{c: c, r: bufio.NewReaderSize(c, 4096)}, nil
}

func (p *proxyClient) close() {
	p.mu.Lock()
	for _, c := range p.idle {
		c.c.Close()
	}
	p.idle = nil
	p.mu.Unlock()
}

var errResponse = errors.New("malformed response")

// roundTrip writes the request and reads the response: its status, whether
// the connection may be reused, and the body discarded (Content-Length only;
// anything else closes the connection after the header).
func (c *proxyConn) roundTrip(url, host string) (status int, keep bool, err error) {
	if _, err := io.WriteString(c.c, "GET "+url+" HTTP/1.1\r\nHost: "+host+"\r\n\r\n"); err != nil {
		return 0, false, err
	}
	line, err := c.r.ReadSlice('\n')
	if err != nil {
		return 0, false, err
	}
	if len(line) < 12 || !bytes.HasPrefix(line, []byte("HTTP/1.1 ")) {
		return 0, false, errResponse
	}
	if status, err = strconv.Atoi(string(line[9:12])); err != nil {
		return 0, false, errResponse
	}
	length, keep := -1, true
	for {
		line, err := c.r.ReadSlice('\n')
		if err != nil {
			return status, false, err
		}
		h := bytes.TrimRight(line, "\r\n")
		if len(h) == 0 {
			break
		}
		name, value, _ := bytes.Cut(h, []byte(":"))
		value = bytes.TrimSpace(value)
		switch {
		case bytes.EqualFold(name, []byte("Content-Length")):
			length, _ = strconv.Atoi(string(value))
		case bytes.EqualFold(name, []byte("Connection")) && bytes.EqualFold(value, []byte("close")):
			keep = false
		}
	}
	if length < 0 {
		return status, false, nil
	}
	_, err = c.r.Discard(length)
	return status, keep && err == nil, err
}
