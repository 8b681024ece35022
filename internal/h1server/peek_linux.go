package h1server

import "syscall"

const canPeek = true

// peekGone looks at the socket without consuming anything: ready is false
// while there is nothing to read; gone is true at end of stream or on an
// error.
func peekGone(fd uintptr) (gone, ready bool) {
	var b [1]byte
	n, _, err := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
	switch {
	case err == syscall.EAGAIN || err == syscall.EWOULDBLOCK || err == syscall.EINTR:
		return false, false
	case err != nil || n == 0:
		return true, true
	}
	return false, true
}
