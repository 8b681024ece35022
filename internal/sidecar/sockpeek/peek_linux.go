package sockpeek

import "syscall"

// Supported: Peek looks at the socket on this platform.
const Supported = true

// Peek looks at the socket fd; nothing is consumed.
func Peek(fd uintptr) Result {
	var b [1]byte
	n, _, err := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
	switch {
	case err == syscall.EAGAIN || err == syscall.EWOULDBLOCK:
		return Nothing
	case err == syscall.EINTR:
		return Interrupted
	case err != nil || n == 0:
		return Closed
	}
	return Data
}
