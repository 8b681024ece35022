//go:build !linux

package sockpeek

// Supported: without MSG_PEEK here, Peek knows nothing.
const Supported = false

// Peek reports Nothing: callers check Supported first.
func Peek(uintptr) Result { return Nothing }
