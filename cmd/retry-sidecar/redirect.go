package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/retrydev/retry-operator/internal/interception"
)

// runRedirect is `retry-sidecar redirect --ports 80,8080 --to 15006
// --exclude-uid 65532`: the init container of transparent interception. It
// installs the nat OUTPUT rules (internal/interception) in its network namespace,
// which is the pod's, and exits: 0 when the rules are in place (also on a
// second run), 1 when they cannot be written (the message names the missing
// capability or kernel support), 2 on bad flags.
func runRedirect(args []string) int {
	fs := flag.NewFlagSet("retry-sidecar redirect", flag.ContinueOnError)
	ports := fs.String("ports", interception.DefaultPorts, "destination TCP ports to intercept, comma-separated (443 is refused: TLS cannot be retried)")
	to := fs.Uint("to", interception.DefaultTo, "local port to redirect to: the sidecar's --transparent-listen port")
	uid := fs.Uint("exclude-uid", interception.DefaultExcludeUID, "UID whose connections are never redirected: the sidecar's")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "retry-sidecar redirect: unexpected arguments %q\n", fs.Args())
		return 2
	}
	p, err := interception.ParsePorts(*ports)
	if err != nil {
		fmt.Fprintf(os.Stderr, "retry-sidecar redirect: --ports: %v\n", err)
		return 2
	}
	if *to > 65535 || *uid > 1<<32-1 {
		fmt.Fprintln(os.Stderr, "retry-sidecar redirect: --to must be a port 1-65535 and --exclude-uid a UID")
		return 2
	}
	r := interception.Rules{Ports: p, To: uint16(*to), ExcludeUID: uint32(*uid)}
	if err := r.Validate(); err != nil {
		fmt.Fprintf(os.Stderr, "retry-sidecar redirect: %v\n", err)
		return 2
	}
	if err := interception.Install(r); err != nil {
		fmt.Fprintf(os.Stderr, "retry-sidecar redirect: %v\n", err)
		return 1
	}
	fmt.Fprintf(os.Stderr, "retry-sidecar redirect: installed %s\n", r)
	return 0
}
