package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"time"
)

// runProbe is `retry-sidecar probe URL`: the kubelet's exec probe. The admin
// endpoints listen on loopback only (docs/sidecar.md), which an HTTP probe from the
// kubelet cannot reach, so the kubelet runs the sidecar's own binary inside the
// pod instead. Exit 0 on a 2xx answer, 1 otherwise. It refuses any address that is
// not loopback, so the probe can never be turned into a request elsewhere.
func runProbe(args []string) int {
	fs := flag.NewFlagSet("retry-sidecar probe", flag.ContinueOnError)
	timeout := fs.Duration("timeout", time.Second, "how long to wait for the answer")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() != 1 {
		fmt.Fprintln(os.Stderr, "usage: retry-sidecar probe [--timeout 1s] http://127.0.0.1:15020/readyz")
		return 2
	}
	u, err := url.Parse(fs.Arg(0))
	if err != nil || u.Scheme != "http" {
		fmt.Fprintf(os.Stderr, "probe: %q: want an http:// URL on a loopback address\n", fs.Arg(0))
		return 2
	}
	if ip := net.ParseIP(u.Hostname()); ip == nil || !ip.IsLoopback() {
		fmt.Fprintf(os.Stderr, "probe: %q: the host must be a loopback IP (127.0.0.1 or ::1)\n", u.Host)
		return 2
	}
	c := &http.Client{Timeout: *timeout, Transport: &http.Transport{Proxy: nil, DisableKeepAlives: true}}
	req, err := http.NewRequestWithContext(context.Background(), http.MethodGet, u.String(), nil)
	if err != nil {
		fmt.Fprintf(os.Stderr, "probe: %v\n", err)
		return 2
	}
	resp, err := c.Do(req)
	if err != nil {
		fmt.Fprintf(os.Stderr, "probe: %v\n", err)
		return 1
	}
	resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		fmt.Fprintf(os.Stderr, "probe: %s answered %d\n", u.Path, resp.StatusCode)
		return 1
	}
	return 0
}
