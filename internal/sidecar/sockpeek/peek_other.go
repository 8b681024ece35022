//go:build !linux

package sockpeek

import "syscall"

// Supported: without MSG_PEEK here, Peek knows nothing.
const Supported = false

// Peek reports Nothing: callers check Supported first.
func Peek(uintptr) Result { return Nothing }

// Hangup is a registration of WatchHangup.
type Hangup struct{}

// WatchHangup reports false: without epoll here, nothing is watched.
func WatchHangup(syscall.RawConn, func()) (Hangup, bool) { return Hangup{}, false }

// Stop does nothing.
func (Hangup) Stop() {}
