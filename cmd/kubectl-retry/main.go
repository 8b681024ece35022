// Command kubectl-retry is the kubectl plugin of retry-operator ("kubectl
// retry"): see a RetryPolicy work before applying it (simulate, rehearse, on a
// virtual clock with the sidecar's own decision code) and after (explain,
// check, against a cluster). The manual is docs/kubectl-retry.md.
//
//	go install github.com/retrydev/retry-operator/cmd/kubectl-retry@latest
//	kubectl retry simulate -f policy.yaml --responses "429 ra=2, 503, 200"
//	kubectl retry simulate -f policy.yaml --grpc-method /shop.v1.Payments/Get --responses "UNAVAILABLE pushback=800, OK"
//
// Exit codes: 0 ok, 1 findings (an invalid policy, a failed check), 2 usage.
package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/retrydev/retry-operator/internal/retrysim"
	"github.com/retrydev/retry-operator/pkg/retrypolicy"
)

// Exit codes.
const (
	exitOK       = 0
	exitFindings = 1
	exitUsage    = 2
)

const usage = `kubectl retry: try a RetryPolicy before applying it, explain it after.

Usage:
  kubectl retry simulate -f POLICY.yaml [--upstream NAME] --responses "429 ra=2, 503, 200"
                         [--seed N] [--deadline D] [--method M] [--header K=V]
                         [--start TIME] [-o|--output json]
  kubectl retry simulate -f POLICY.yaml [--upstream NAME] --responses "UNAVAILABLE, OK"
                         [--grpc-method /package.Service/Method] (and the flags above)
  kubectl retry rehearse -f POLICY.yaml --requests 600 --quota 120/m [--upstream NAME]
                         [--concurrency C] [--latency 2s] [--pods N] [--skew SKEW]
                         [--seed N] [-o|--output json]
  kubectl retry explain pod/NAME [-n|--namespace NS] [--host H [--grpc-method /pkg.Svc/M]]
                         [--kubeconfig FILE] [--context NAME] [-o|--output json]
  kubectl retry check [-n|--namespace NS]
                         [--kubeconfig FILE] [--context NAME] [-o|--output json]

  kubectl retry SUBCOMMAND -h lists its flags; durations are Go's (5s, 500ms, 1m30s).

Exit codes: 0 ok, 1 findings, 2 usage. Manual: docs/kubectl-retry.md
`

// responseTokens is what --responses takes (docs/kubectl-retry.md#simulate).
const responseTokens = `
Response tokens of --responses, comma-separated, attempt n answered by token n:
  200, 503, ...                      that status (100..599)
  429 ra=2                           with Retry-After: 2 (verbatim: ra=soon is a malformed one)
  503 ra="Mon, 30 Nov 2026 12:00:05 GMT"
                                     a Retry-After HTTP-date (quoted: it has a comma)
  date="Mon, 30 Nov 2026 11:59:58 GMT"
                                     a Date header: the hint is measured against it (clock skew)
  ratelimit-remaining=0 ratelimit-reset=30
                                     RateLimit-Remaining / RateLimit-Reset headers
  timeout                            no answer: the attempt runs into perTryTimeout or the deadline
  refused                            the connection is refused (the request never left)

A gRPC call's answers instead (all tokens gRPC, or none; docs/grpc.md):
  OK, UNAVAILABLE, RESOURCE_EXHAUSTED, DEADLINE_EXCEEDED, ...
                                     that grpc-status, by its canonical (upper-case) name
  UNAVAILABLE pushback=800           with grpc-retry-pushback-ms: 800, the exact minimum wait
                                     (verbatim: pushback=-1 or pushback=soon asks for no retry)
  The call's method is --grpc-method (default: the first gRPC method of replayableMethods).
`

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

// command is one subcommand: it parses its own flags and returns an exit code.
type command func(args []string, stdout, stderr io.Writer) int

func run(args []string, stdout, stderr io.Writer) int {
	cmds := map[string]command{
		"simulate": runSimulate,
		"rehearse": runRehearse,
		"explain":  runExplain,
		"check":    runCheck,
	}
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return exitUsage
	}
	switch args[0] {
	case "-h", "--help", "help":
		fmt.Fprint(stdout, usage)
		return exitOK
	}
	c, ok := cmds[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "kubectl retry: unknown subcommand %q; want simulate, rehearse, explain or check\n", args[0])
		return exitUsage
	}
	return c(args[1:], stdout, stderr)
}

// parseFlags parses flags anywhere among the arguments (kubectl style:
// "explain pod/x --host h") and returns the positional ones. Errors are
// reported on stderr by the caller's exit code 2.
func parseFlags(fs *flag.FlagSet, args []string) ([]string, error) {
	fs.SetOutput(io.Discard)
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return nil, helpError{fs}
			}
			return nil, err
		}
		args = fs.Args()
		if len(args) == 0 {
			return pos, nil
		}
		if args[0] == "--" {
			return append(pos, args[1:]...), nil
		}
		pos = append(pos, args[0])
		args = args[1:]
	}
}

// helpError is -h or --help: not an error, the flags are printed.
type helpError struct{ fs *flag.FlagSet }

func (helpError) Error() string { return "help requested" }

// usageErr prints a one-line usage error and returns exit code 2.
func usageErr(stderr io.Writer, sub string, err error) int {
	var h helpError
	if errors.As(err, &h) {
		fmt.Fprint(stderr, usage)
		fmt.Fprintf(stderr, "\nFlags of %s:\n", sub)
		h.fs.SetOutput(stderr)
		h.fs.PrintDefaults()
		if sub == "simulate" {
			fmt.Fprint(stderr, responseTokens)
		}
		return exitOK
	}
	fmt.Fprintf(stderr, "kubectl retry %s: %v\n", sub, err)
	return exitUsage
}

// outputFlag registers -o/--output (text or json).
func outputFlag(fs *flag.FlagSet) *string {
	o := new(string)
	fs.StringVar(o, "o", "", "output format: json (default: a table for people)")
	fs.StringVar(o, "output", "", "same as -o")
	return o
}

func checkOutput(o string) error {
	switch o {
	case "", "text", "json":
		return nil
	}
	return fmt.Errorf("-o %s: want json", o)
}

// parseCommand parses a subcommand's flags (parseFlags) and checks its -o;
// it returns the positional arguments.
func parseCommand(fs *flag.FlagSet, args []string, output *string) ([]string, error) {
	pos, err := parseFlags(fs, args)
	if err != nil {
		return nil, err
	}
	return pos, checkOutput(*output)
}

// parseNoArgs is parseCommand for a subcommand that takes no positional
// argument.
func parseNoArgs(fs *flag.FlagSet, args []string, output *string) error {
	pos, err := parseCommand(fs, args, output)
	if err == nil && len(pos) > 0 {
		err = fmt.Errorf("unexpected argument %q", pos[0])
	}
	return err
}

// report writes a subcommand's result v: as JSON with -o json, else by forPeople
// for people. It returns code, or exitFindings when the JSON cannot be
// written (the error printed on stderr).
func report(stdout, stderr io.Writer, output string, v any, code int, forPeople func()) int {
	if output != "json" {
		forPeople()
		return code
	}
	if err := writeJSON(stdout, v); err != nil {
		fmt.Fprintln(stderr, err)
		return exitFindings
	}
	return code
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// headerFlag collects repeated --header K=V (or "K: V").
type headerFlag []string

func (h *headerFlag) String() string     { return strings.Join(*h, ",") }
func (h *headerFlag) Set(v string) error { *h = append(*h, v); return nil }

// loadErr reports a policy file that did not load: exit 1 for an invalid
// policy (a finding), 2 for a usage mistake.
func loadErr(stderr io.Writer, sub string, err error) int {
	var ue *retrysim.UsageError
	if errors.As(err, &ue) {
		return usageErr(stderr, sub, err)
	}
	return failed(stderr, sub, err)
}

// failed prints err as the subcommand's failure and returns exit code 1.
func failed(stderr io.Writer, sub string, err error) int {
	fmt.Fprintf(stderr, "kubectl retry %s: %v\n", sub, err)
	return exitFindings
}

// policyFlags are the flags of the commands that run one upstream's policy
// from a file: -f and --upstream.
type policyFlags struct {
	file, upstream string
}

func (f *policyFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.file, "f", "", "RetryPolicy YAML file (what you would kubectl apply)")
	fs.StringVar(&f.upstream, "upstream", "", "upstream name, or a route rule <route>/rules/<i> (needed when the file has several)")
}

// policy loads the file and picks the upstream's policy; report an error with
// loadErr.
func (f *policyFlags) policy() (*retrypolicy.Policy, error) {
	_, p, err := f.policyFile()
	return p, err
}

// policyFile is policy with the parsed file, for what else the command needs
// of it.
func (f *policyFlags) policyFile() (*retrysim.PolicyFile, *retrypolicy.Policy, error) {
	file, err := retrysim.ReadPolicyFile(f.file)
	if err != nil {
		return nil, nil, err
	}
	p, err := file.Pick(f.upstream)
	return file, p, err
}

// checkGRPCMethodName checks the form of a --grpc-method, if one is given:
// a gRPC call's :path.
func checkGRPCMethodName(grpcMethod string) error {
	svc, m, ok := strings.Cut(strings.TrimPrefix(grpcMethod, "/"), "/")
	if grpcMethod != "" && (!strings.HasPrefix(grpcMethod, "/") || !ok || svc == "" || m == "" || strings.Contains(m, "/")) {
		return fmt.Errorf("--grpc-method %q: want /package.Service/Method", grpcMethod)
	}
	return nil
}

// grpcPatterns are the gRPC method patterns among replayableMethods.
func grpcPatterns(methods []string) []string {
	var out []string
	for _, m := range methods {
		if strings.HasPrefix(m, "/") {
			out = append(out, m)
		}
	}
	return out
}
