// Package sockpeek tells what waits on a socket without consuming it: one
// non-blocking, one-byte MSG_PEEK. The upstream client looks before it reuses
// a pooled connection (docs/retry-semantics.md#pool); the app-side server
// looks to notice an app that hung up while its request runs.
package sockpeek

// Result is what a peek found.
type Result uint8

const (
	Nothing     Result = iota // nothing to read: the peer is quiet and the socket open
	Data                      // bytes wait to be read
	Closed                    // end of stream, or an error on the socket
	Interrupted               // the call was interrupted (EINTR): nothing is known
)
