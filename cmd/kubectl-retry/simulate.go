package main

import (
	"flag"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/retrydev/retry-operator/internal/retrysim"
	"github.com/retrydev/retry-operator/internal/sidecar"
	"github.com/retrydev/retry-operator/pkg/retrypolicy"
)

func runSimulate(args []string, stdout, stderr io.Writer) int {
	const sub = "simulate"
	fs := flag.NewFlagSet(sub, flag.ContinueOnError)
	var pf policyFlags
	pf.register(fs)
	responses := fs.String("responses", "", `the upstream's answers in order, e.g. "429 ra=2, 503, 200"`)
	seed := fs.Uint64("seed", 1, "seed of the jitter")
	deadline := new(time.Duration)
	sidecar.DurationVar(fs, deadline, "deadline", 0, "deadline of the logical request (default: the upstream's deadline)")
	method := fs.String("method", http.MethodGet, "request method")
	var headers headerFlag
	fs.Var(&headers, "header", "request header K=V (repeatable), e.g. Idempotency-Key=k1")
	start := fs.String("start", "", "virtual start time, RFC 3339 or IMF-fixdate (default: now, whole seconds)")
	output := outputFlag(fs)
	if err := parseNoArgs(fs, args, output); err != nil {
		return usageErr(stderr, sub, err)
	}
	if *responses == "" {
		return usageErr(stderr, sub, fmt.Errorf(`--responses: give the upstream's answers, e.g. "429 ra=2, 503, 200"`))
	}
	script, err := retrysim.ParseResponses(*responses)
	if err != nil {
		return usageErr(stderr, sub, err)
	}
	h, err := parseHeaders(headers)
	if err != nil {
		return usageErr(stderr, sub, err)
	}
	t0, err := parseStart(*start)
	if err != nil {
		return usageErr(stderr, sub, err)
	}
	if *deadline < 0 {
		return usageErr(stderr, sub, fmt.Errorf("--deadline %s: must be > 0", *deadline))
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
	res, err := retrysim.Simulate(retrysim.SimulateInput{
		Policy: p, Method: strings.ToUpper(*method), Header: h, Responses: script, Seed: *seed, Start: t0,
	})
	if err != nil {
		return usageErr(stderr, sub, err)
	}
	return report(stdout, stderr, *output, res, exitOK, func() { printSimulation(stdout, p.Config(), res) })
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
	var t table
	t.add("", "N", "AT", "RESPONSE", "DECISION", "WAIT")
	for _, s := range res.Attempts {
		decision := s.Decision
		if s.Outcome != "" {
			decision += ": " + s.Outcome
		}
		wait := "-"
		if s.Wait != "" {
			wait = short(s.Wait)
		}
		t.add(note(s), strconv.Itoa(s.N), short(s.At), clip(s.Response, 40), decision, wait)
	}
	t.write(w)
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
