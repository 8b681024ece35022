package main_test

import (
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
)

// flakyUpstreamEnv, when set in the environment of this test binary, turns it
// into the flaky upstream of the network-namespace tests (TestMain runs
// runFlakyUpstream instead of the tests): a process of its own, so it can be
// started inside a namespace with `ip netns exec`. The value is
// "addr,addr,…|arrivals file|ready file".
const flakyUpstreamEnv = "RETRY_SIDECAR_TEST_FLAKY_UPSTREAM"

// runFlakyUpstream serves every address: the first request for a path answers
// 503, every later one 200. Each arrival is appended to the arrivals file as
// "<local address> <path>" before the answer; the ready file is written once
// every address listens.
func runFlakyUpstream(spec string) int {
	parts := strings.Split(spec, "|")
	if len(parts) != 3 {
		fmt.Fprintf(os.Stderr, "%s=%q: want addrs|arrivals|ready\n", flakyUpstreamEnv, spec)
		return 2
	}
	arrivals, err := os.OpenFile(parts[1], os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	var mu sync.Mutex
	seen := map[string]int{}
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		local := r.Context().Value(http.LocalAddrContextKey).(net.Addr).String()
		mu.Lock()
		seen[r.URL.Path]++
		n := seen[r.URL.Path]
		fmt.Fprintf(arrivals, "%s %s\n", local, r.URL.Path)
		mu.Unlock()
		if n == 1 {
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprintln(w, "flaky")
			return
		}
		fmt.Fprintln(w, "hello")
	})
	errs := make(chan error)
	for _, addr := range strings.Split(parts[0], ",") {
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		go func() { errs <- http.Serve(ln, handler) }()
	}
	if err := os.WriteFile(parts[2], []byte("ready"), 0o644); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Fprintln(os.Stderr, <-errs)
	return 1
}
