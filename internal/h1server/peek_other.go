//go:build !linux

package h1server

// Without MSG_PEEK the connection is not watched: a disconnect is seen when
// the response is written.
const canPeek = false

func peekGone(uintptr) (gone, ready bool) { return false, true }
