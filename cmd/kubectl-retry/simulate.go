package main

import (
	"flag"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/retrydev/retry-operator/api/v1alpha1"
	"github.com/retrydev/retry-operator/internal/retrysim"
	"github.com/retrydev/retry-operator/internal/sidecar"
	"github.com/retrydev/retry-operator/pkg/retrypolicy"
)

func runSimulate(args []string, stdout, stderr io.Writer) int {
	const sub = "simulate"
	fs := flag.NewFlagSet(sub, flag.ContinueOnError)
	var pf policyFlags
	pf.register(fs)
	responses := fs.String("responses", "", `the upstream's answers in order, e.g. "429 ra=2, 503, 200" or "UNAVAILABLE, OK"`)
	seed := fs.Uint64("seed", 1, "seed of the jitter")
	deadline := new(time.Duration)
	sidecar.DurationVar(fs, deadline, "deadline", 0, "deadline of the logical request (default: the upstream's deadline)")
	method := fs.String("method", http.MethodGet, "request method")
	grpcMethod := fs.String("grpc-method", "", "the gRPC call's method, /package.Service/Method (with gRPC status tokens)")
	var headers headerFlag
	fs.Var(&headers, "header", "request header K=V (repeatable), e.g. Idempotency-Key=k1; gRPC metadata for a gRPC call")
	start := fs.String("start", "", "virtual start time, RFC 3339 or IMF-fixdate (default: now, whole seconds)")
	output := outputFlag(fs)
	if err := parseNoArgs(fs, args, output); err != nil {
		return usageErr(stderr, sub, err)
	}
	in, err := simulateInput(*responses, headers, *start, *deadline)
	if err != nil {
		return usageErr(stderr, sub, err)
	}
	p, err := pf.policy()
	if err != nil {
		return loadErr(stderr, sub, err)
	}
	if *deadline > 0 {
		cfg := p.Config()
		cfg.Deadline = *deadline
		if p, err = retrypolicy.Compile(cfg); err != nil {
			return usageErr(stderr, sub, fmt.Errorf("--deadline %s: %w", *deadline, err))
		}
	}
	in.Policy, in.Method, in.Seed = p, strings.ToUpper(*method), *seed
	if in.Responses[0].IsGRPC() {
		m, err := grpcMethodOf(fs, true, *grpcMethod, *method, p.Config())
		if err != nil {
			return usageErr(stderr, sub, err)
		}
		return simulateGRPC(stdout, stderr, *output, retrysim.GRPCInput{Policy: p, Method: m,
			Metadata: in.Header, Responses: in.Responses, Seed: *seed, Start: in.Start})
	}
	if _, err := grpcMethodOf(fs, false, *grpcMethod, *method, p.Config()); err != nil {
		return usageErr(stderr, sub, err)
	}
	res, err := retrysim.Simulate(in)
	if err != nil {
		return usageErr(stderr, sub, err)
	}
	return report(stdout, stderr, *output, res, exitOK, func() { printSimulation(stdout, p.Config(), res) })
}

// simulateInput checks simulate's flags and reads them into an input
// without the policy: the responses, the headers, the start.
func simulateInput(responses string, headers headerFlag, start string, deadline time.Duration) (retrysim.SimulateInput, error) {
	var in retrysim.SimulateInput
	if responses == "" {
		return in, fmt.Errorf(`--responses: give the upstream's answers, e.g. "429 ra=2, 503, 200" or "UNAVAILABLE, OK"`)
	}
	var err error
	if in.Responses, err = retrysim.ParseResponses(responses); err != nil {
		return in, err
	}
	if in.Header, err = parseHeaders(headers); err != nil {
		return in, err
	}
	if in.Start, err = parseStart(start); err != nil {
		return in, err
	}
	if deadline < 0 {
		return in, fmt.Errorf("--deadline %s: must be > 0", deadline)
	}
	return in, nil
}

// grpcMethodOf is the method of a gRPC call: --grpc-method, or --method
// when it is a /-path, or by default the first gRPC method replayableMethods
// lists (a /package.Service/* pattern gives /package.Service/Call), so that
// a bare --responses of status names shows the policy retrying. It is "" for
// HTTP tokens, which take no gRPC method.
func grpcMethodOf(fs *flag.FlagSet, grpcTokens bool, grpcMethod, method string, c retrypolicy.Config) (string, error) {
	methodSet := false
	fs.Visit(func(f *flag.Flag) { methodSet = methodSet || f.Name == "method" })
	switch {
	case !grpcTokens && grpcMethod != "":
		return "", fmt.Errorf("--grpc-method %s: the responses are HTTP statuses; a gRPC call's are status names such as UNAVAILABLE", grpcMethod)
	case !grpcTokens:
		return "", nil
	case methodSet && !strings.HasPrefix(method, "/"):
		return "", fmt.Errorf("--method %s: a gRPC call is a POST to its method; give it as --grpc-method /package.Service/Method", method)
	case methodSet && grpcMethod != "" && method != grpcMethod:
		return "", fmt.Errorf("--method %s and --grpc-method %s: give the gRPC method once", method, grpcMethod)
	case methodSet:
		grpcMethod = method
	case grpcMethod == "":
		patterns := grpcPatterns(c.ReplayableMethods)
		if len(patterns) == 0 {
			return "", fmt.Errorf("--grpc-method: a gRPC call needs its method, e.g. --grpc-method /shop.v1.Payments/Get " +
				"(the upstream's replayableMethods name none to default to)")
		}
		grpcMethod = patterns[0]
		if svc, ok := strings.CutSuffix(grpcMethod, "*"); ok {
			grpcMethod = svc + "Call"
		}
	}
	return grpcMethod, checkGRPCMethodName(grpcMethod)
}

func parseHeaders(hs []string) (http.Header, error) {
	h := http.Header{}
	for _, kv := range hs {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			k, v, ok = strings.Cut(kv, ":")
		}
		k, v = strings.TrimSpace(k), strings.TrimSpace(v)
		if !ok || k == "" {
			return nil, fmt.Errorf("--header %q: want K=V, e.g. Idempotency-Key=k1", kv)
		}
		h.Add(k, v)
	}
	return h, nil
}

func parseStart(s string) (time.Time, error) {
	if s == "" {
		return time.Now().UTC().Truncate(time.Second), nil
	}
	if t, err := time.Parse(time.RFC3339, s); err == nil {
		return t.UTC(), nil
	}
	if t, err := http.ParseTime(s); err == nil {
		return t.UTC(), nil
	}
	return time.Time{}, fmt.Errorf("--start %q: want RFC 3339 (2026-11-30T12:00:00Z) or an IMF-fixdate", s)
}

// printSimulation writes the timeline for people, within 100 columns.
func printSimulation(w io.Writer, c retrypolicy.Config, res retrysim.SimulateResult) {
	fmt.Fprintf(w, "upstream %s: %s %s (seed %d, start %s)\n", res.Upstream, res.Method, res.URL, res.Seed, res.Start)
	fmt.Fprintf(w, "policy: %s\n\n", describePolicy(c))
	writeAttempts(w, res.Attempts, note)
	fmt.Fprintf(w, "\noutcome: %s, the app gets %d after %d attempt(s), %s\n",
		res.Outcome, res.Status, len(sentSteps(res)), short(res.Duration))
	fmt.Fprintln(w, "headers:")
	for _, k := range res.SortedHeaders() {
		fmt.Fprintf(w, "  %s: %s\n", k, res.Headers[k])
	}
	if res.Unused > 0 {
		fmt.Fprintf(w, "(%d scripted response(s) not used)\n", res.Unused)
	}
}

// writeAttempts writes a simulation's attempts as a table, one row each with
// the note noteOf gives it.
func writeAttempts(w io.Writer, steps []retrysim.Step, noteOf func(retrysim.Step) string) {
	var t table
	t.add("", "N", "AT", "RESPONSE", "DECISION", "WAIT")
	for _, s := range steps {
		decision := s.Decision
		if s.Outcome != "" {
			decision += ": " + s.Outcome
		}
		wait := "-"
		if s.Wait != "" {
			wait = short(s.Wait)
		}
		t.add(noteOf(s), strconv.Itoa(s.N), short(s.At), clip(s.Response, 40), decision, wait)
	}
	t.write(w)
}

// table prints rows in aligned columns (two blanks apart, no trailing blanks);
// a row's note, if any, goes on the lines after it, under the second column.
type table struct {
	rows  [][]string
	notes []string
}

func (t *table) add(note string, cells ...string) {
	t.rows = append(t.rows, cells)
	t.notes = append(t.notes, note)
}

func (t *table) write(w io.Writer) {
	var width []int
	for _, r := range t.rows {
		for i, c := range r {
			if i >= len(width) {
				width = append(width, 0)
			}
			width[i] = max(width[i], utf8.RuneCountInString(c))
		}
	}
	for k, r := range t.rows {
		var b strings.Builder
		for i, c := range r {
			b.WriteString(c)
			if i < len(r)-1 {
				b.WriteString(strings.Repeat(" ", width[i]-utf8.RuneCountInString(c)+2))
			}
		}
		fmt.Fprintln(w, strings.TrimRight(b.String(), " "))
		if t.notes[k] != "" {
			indent := strings.Repeat(" ", width[0]+2)
			for _, l := range strings.Split(wrapWords(t.notes[k], 98-len(indent), ""), "\n") {
				fmt.Fprintln(w, indent+l)
			}
		}
	}
}

func sentSteps(res retrysim.SimulateResult) []retrysim.Step {
	var out []retrysim.Step
	for _, s := range res.Attempts {
		if s.Response != "(not sent)" {
			out = append(out, s)
		}
	}
	return out
}

func note(s retrysim.Step) string {
	var parts []string
	if s.Admission != "" {
		parts = append(parts, "waited "+short(s.Admission)+" for admission (rateLimit/concurrency)")
	}
	if s.TimedOut != "" {
		parts = append(parts, "timed out after "+short(s.TimedOut)+" ("+s.TimedOutBy+")")
	}
	if s.NotBefore != "" {
		parts = append(parts, "not before +"+short(s.NotBefore))
	}
	switch {
	case s.RetryAfterReason != "":
		parts = append(parts, "Retry-After malformed ("+s.RetryAfterReason+"): local backoff")
	case s.RetryAfter != "":
		parts = append(parts, "Retry-After parsed as "+s.RetryAfter)
	}
	if s.Skew != "" {
		parts = append(parts, "clock skew "+short(s.Skew))
	}
	if s.ErrorClass != "" {
		parts = append(parts, "no response: "+s.ErrorClass)
	}
	return strings.Join(parts, "; ")
}

// short rounds a duration string to milliseconds for people; JSON keeps the
// exact value.
func short(d string) string {
	x, err := time.ParseDuration(d)
	if err != nil {
		return d
	}
	return x.Round(time.Millisecond).String()
}

func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n-1] + "…"
}

func describePolicy(c retrypolicy.Config) string {
	var b strings.Builder
	fmt.Fprintf(&b, "maxAttempts %d, deadline %s", c.MaxAttempts, c.Deadline)
	if c.PerTryTimeout > 0 {
		fmt.Fprintf(&b, ", perTryTimeout %s", c.PerTryTimeout)
	}
	fmt.Fprintf(&b, ", backoff %s..%s %s, retryOn %s, maxWait %s, spread %s",
		c.Backoff.Base, c.Backoff.Max, c.Backoff.Jitter, ints(c.RetryOnStatus), c.RetryAfterMaxWait, c.RetryAfterSpread)
	if r := c.RateLimit; r != nil {
		fmt.Fprintf(&b, ", rateLimit %s/min burst %d", strconv.FormatFloat(r.RequestsPerSecond*60, 'f', -1, 64), r.Burst)
	}
	return wrap(b.String(), 92, "        ")
}

func ints(xs []int) string {
	s := make([]string, len(xs))
	for i, x := range xs {
		s[i] = strconv.Itoa(x)
	}
	return "[" + strings.Join(s, ",") + "]"
}

// wrap breaks text at ", " so no line passes width; continuation lines get indent.
func wrap(s string, width int, indent string) string {
	var lines []string
	line := ""
	for _, part := range strings.Split(s, ", ") {
		switch {
		case line == "":
			line = part
		case len(line)+2+len(part) > width:
			lines = append(lines, line+",")
			line = indent + part
		default:
			line += ", " + part
		}
	}
	return strings.Join(append(lines, line), "\n")
}

// simulateGRPC runs a gRPC call (retrysim.SimulateGRPC) and reports it.
func simulateGRPC(stdout, stderr io.Writer, output string, in retrysim.GRPCInput) int {
	res, err := retrysim.SimulateGRPC(in)
	if err != nil {
		return usageErr(stderr, "simulate", err)
	}
	return report(stdout, stderr, output, res, exitOK, func() { printGRPCSimulation(stdout, in.Policy.Config(), res) })
}

// printGRPCSimulation writes a gRPC call's timeline for people, within 100
// columns: per attempt its status, the wait and why, or why it stopped.
func printGRPCSimulation(w io.Writer, c retrypolicy.Config, res retrysim.GRPCResult) {
	head := fmt.Sprintf("upstream %s: gRPC %s to %s (seed %d, start %s)", res.Upstream, res.Method, res.Authority, res.Seed, res.Start)
	fmt.Fprintln(w, wrapWords(head, 98, "  "))
	fmt.Fprintf(w, "policy: %s\n", describeGRPCPolicy(c))
	fmt.Fprintf(w, "%s\n\n", wrapWords("method "+res.Method+": "+replayability(res.Replayable), 98, "  "))
	writeAttempts(w, res.Attempts, func(s retrysim.Step) string { return grpcNote(s, c, res.Nested) })
	fmt.Fprintf(w, "\noutcome: %s, the app gets %s after %d attempt(s), %s\n",
		res.Outcome, res.Status, len(res.Attempts)-notSent(res.Attempts), short(res.Duration))
	fmt.Fprintln(w, "trailers:")
	for _, k := range res.SortedTrailers() {
		fmt.Fprintf(w, "  %s: %s\n", k, res.Trailers[k])
	}
	if res.Unused > 0 {
		fmt.Fprintf(w, "(%d scripted response(s) not used)\n", res.Unused)
	}
}

// parseDur reads a duration of a Step, 0 when there is none.
func parseDur(s string) time.Duration {
	d, _ := time.ParseDuration(s)
	return d
}

func notSent(steps []retrysim.Step) int {
	n := 0
	for _, s := range steps {
		if s.Response == "(not sent)" {
			n++
		}
	}
	return n
}

// replayability says whether a gRPC method may be sent twice, and by which
// patterns of replayableMethods.
func replayability(replayable bool) string {
	if replayable {
		return "replayable (it matches a gRPC pattern of replayableMethods)"
	}
	return "not replayable (no gRPC pattern of replayableMethods matches it): never sent twice"
}

func describeGRPCPolicy(c retrypolicy.Config) string {
	var b strings.Builder
	fmt.Fprintf(&b, "maxAttempts %d, deadline %s", c.MaxAttempts, c.Deadline)
	if c.PerTryTimeout > 0 {
		fmt.Fprintf(&b, ", perTryTimeout %s", c.PerTryTimeout)
	}
	fmt.Fprintf(&b, ", backoff %s..%s %s, retryOn.grpcStatusCodes %s, replayableMethods %s, maxWait %s, spread %s",
		c.Backoff.Base, c.Backoff.Max, c.Backoff.Jitter, grpcCodeNames(c.RetryOnGRPCStatus),
		"["+strings.Join(grpcPatterns(c.ReplayableMethods), ",")+"]", c.RetryAfterMaxWait, c.RetryAfterSpread)
	return wrap(b.String(), 90, "        ")
}

// grpcCodeNames are the names of gRPC status codes, as the API spells them.
func grpcCodeNames(codes []uint32) string {
	s := make([]string, len(codes))
	for i, n := range codes {
		s[i] = string(v1alpha1.GRPCStatusCodeOf(n))
	}
	return "[" + strings.Join(s, ",") + "]"
}

// grpcNote says why a gRPC attempt's wait is what it is, or why the call
// stopped there, in the terms of docs/grpc.md#what-is-retried-when.
func grpcNote(s retrysim.Step, c retrypolicy.Config, nested bool) string {
	var parts []string
	if s.Admission != "" {
		parts = append(parts, "waited "+short(s.Admission)+" for admission (rateLimit/concurrency)")
	}
	switch {
	case s.Decision == "retry" && s.WaitBy == "pushback":
		why := "pushback " + short(s.Pushback) + ", the exact minimum"
		if w, p := parseDur(s.Wait), parseDur(s.Pushback); w > p {
			why += ", + " + short((w - p).String()) + " jitter (≤ retryAfter.spread " + c.RetryAfterSpread.String() + ")"
		}
		parts = append(parts, why+"; backoff alone "+short(s.Backoff))
	case s.Decision == "retry" && s.Pushback != "":
		parts = append(parts, "backoff, longer than pushback "+short(s.Pushback))
	case s.Decision == "retry":
		parts = append(parts, "backoff")
	}
	if why := stopReason(s, c, nested); why != "" {
		parts = append(parts, why)
	}
	return strings.Join(parts, "; ")
}

// stopReason says why the call ended at step s, if it did.
func stopReason(s retrysim.Step, c retrypolicy.Config, nested bool) string {
	name, _, _ := strings.Cut(s.Response, " ")
	code, _ := v1alpha1.GRPCStatusCode(name).Number()
	notBefore := ""
	if s.NotBefore != "" {
		notBefore = ", not before +" + short(s.NotBefore)
	}
	switch retrypolicy.Outcome(s.Outcome) {
	case retrypolicy.OutcomeNotRetryable:
		if code == 0 || !slices.Contains(c.RetryOnGRPCStatus, code) {
			return name + " is not in retryOn.grpcStatusCodes"
		}
		if s.PushbackReason != "" {
			return "grpc-retry-pushback-ms is " + s.PushbackReason + ": the server asks for no retry"
		}
	case retrypolicy.OutcomeNotReplayable:
		return "the method is not replayable: a listed status is given back"
	case retrypolicy.OutcomeDeferred:
		if s.Response == "(not sent)" {
			return "the quota allows no attempt now" + notBefore
		}
		if parseDur(s.Pushback) > c.RetryAfterMaxWait {
			return "pushback " + short(s.Pushback) + " is longer than retryAfter.maxWait " + c.RetryAfterMaxWait.String() + notBefore
		}
		return "pushback " + short(s.Pushback) + " ends past the deadline" + notBefore
	case retrypolicy.OutcomeDeadlineExceeded:
		return "the backoff and the next attempt do not fit the deadline" + notBefore
	case retrypolicy.OutcomeExhausted:
		if nested {
			return "the call came with x-retry-attempt: another layer retries it, this one never multiplies it"
		}
		return "maxAttempts " + strconv.Itoa(c.MaxAttempts) + " reached"
	case retrypolicy.OutcomeBudgetExhausted:
		return "the outage budget allows no more retries now"
	case retrypolicy.OutcomeShed:
		return "admission (rateLimit/concurrency) had no room in time" + notBefore
	}
	return ""
}
