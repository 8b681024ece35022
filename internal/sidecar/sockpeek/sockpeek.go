// Package sockpeek tells what happens on a socket without consuming it. Peek
// is one non-blocking, one-byte MSG_PEEK: the upstream client looks before it
// reuses a pooled connection (docs/retry-semantics.md#pool). WatchHangup
// notices a peer that closed even with its bytes still unread: the app-side
// server watches every app connection from the moment it is accepted
// (docs/performance.md#the-app-side-server).
package sockpeek

// Result is what a peek found.
type Result uint8

const (
	Nothing     Result = iota // nothing to read: the peer is quiet and the socket open
	Data                      // bytes wait to be read
	Closed                    // end of stream, or an error on the socket
	Interrupted               // the call was interrupted (EINTR): nothing is known
)
