package sockpeek

import (
	"io"
	"net"
	"syscall"
	"testing"
	"time"
)

// A loopback TCP pair: what the peer does decides what Peek finds, and the
// bytes stay readable.
func TestPeekTellsQuietFromDataFromClosed(t *testing.T) {
	for _, c := range []struct {
		name string
		peer func(net.Conn)
		want Result
	}{
		{"a quiet peer is Nothing", func(net.Conn) {}, Nothing},
		{"bytes from the peer are Data", func(p net.Conn) { io.WriteString(p, "x") }, Data},
		{"a peer that closed is Closed", func(p net.Conn) { p.Close() }, Closed},
	} {
		t.Run(c.name, func(t *testing.T) {
			local, peer := tcpPair(t)
			c.peer(peer)
			time.Sleep(20 * time.Millisecond) // loopback delivery
			if got := peek(t, local); got != c.want {
				t.Fatalf("Peek = %d, want %d", got, c.want)
			}
			if c.want == Data {
				buf := make([]byte, 1)
				if n, err := local.Read(buf); n != 1 || buf[0] != 'x' || err != nil {
					t.Fatalf("after Peek, Read = %d %q %v; want the byte still there", n, buf[:n], err)
				}
			}
		})
	}
}

func peek(t *testing.T, c net.Conn) Result {
	rc, err := c.(syscall.Conn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var r Result
	if err := rc.Control(func(fd uintptr) { r = Peek(fd) }); err != nil {
		t.Fatal(err)
	}
	return r
}

func tcpPair(t *testing.T) (local, peer net.Conn) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() { c, _ := ln.Accept(); accepted <- c }()
	local, err = net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	peer = <-accepted
	t.Cleanup(func() { local.Close(); peer.Close() })
	return local, peer
}
