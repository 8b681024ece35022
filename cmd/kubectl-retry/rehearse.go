package main

import (
	"flag"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/retrydev/retry-operator/internal/retrysim"
	"github.com/retrydev/retry-operator/internal/sidecar"
	"github.com/retrydev/retry-operator/pkg/retrypolicy"
)

func runRehearse(args []string, stdout, stderr io.Writer) int {
	const sub = "rehearse"
	fs := flag.NewFlagSet(sub, flag.ContinueOnError)
	var pf policyFlags
	pf.register(fs)
	requests := fs.Int("requests", 20, "logical requests to send")
	quota := fs.String("quota", "", "the upstream's quota per rolling window, e.g. 120/m (s, m or h)")
	concurrency := fs.Int("concurrency", 10, "the app's workers: requests in progress at once")
	latency := new(time.Duration)
	sidecar.DurationVar(fs, latency, "latency", 100*time.Millisecond, "the upstream's answer time")
	seed := fs.Uint64("seed", 1, "seed of the jitter")
	pods := fs.Int("pods", 1, "sidecars the requests go through: with a quotaRef they share its SharedQuota (given in -f), else each gets rateLimit ÷ pods")
	skew := fs.String("skew", "1:1", "A:B: the first pod gets A shares of the requests and workers, every other pod B")
	output := outputFlag(fs)
	if err := parseNoArgs(fs, args, output); err != nil {
		return usageErr(stderr, sub, err)
	}
	if *quota == "" {
		return usageErr(stderr, sub, fmt.Errorf("--quota: give the upstream's quota, e.g. 120/m"))
	}
	q, window, err := retrysim.ParseQuota(*quota)
	if err != nil {
		return usageErr(stderr, sub, err)
	}
	switch {
	case *requests < 1 || *requests > 1_000_000:
		return usageErr(stderr, sub, fmt.Errorf("--requests %d: must be 1..1000000", *requests))
	case *concurrency < 1 || *concurrency > 10_000:
		return usageErr(stderr, sub, fmt.Errorf("--concurrency %d: must be 1..10000", *concurrency))
	case *latency < 0:
		return usageErr(stderr, sub, fmt.Errorf("--latency %s: must be >= 0", *latency))
	case *pods < 1 || *pods > 1000:
		return usageErr(stderr, sub, fmt.Errorf("--pods %d: must be 1..1000", *pods))
	}
	sk, err := parseSkew(*skew)
	if err != nil {
		return usageErr(stderr, sub, err)
	}
	file, p, err := pf.policyFile()
	if err != nil {
		return loadErr(stderr, sub, err)
	}
	shared, err := file.SharedQuotaOf(p)
	if err != nil {
		return loadErr(stderr, sub, err)
	}
	res, err := retrysim.Rehearse(retrysim.RehearseInput{Policy: p, Requests: *requests, Quota: q,
		QuotaWindow: window, Concurrency: *concurrency, Latency: *latency, Seed: *seed,
		Start: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), Pods: *pods, Skew: sk, SharedQuota: shared})
	if err != nil {
		return failed(stderr, sub, err)
	}
	code := exitOK
	if res.Status429 > 0 || len(res.FinalErrors) > 0 {
		code = exitFindings
	}
	return report(stdout, stderr, *output, res, code, func() { printRehearsal(stdout, p.Config(), res) })
}

// printRehearsal writes the rehearsal of policy c for people: the setting,
// then one line per measure.
func printRehearsal(stdout io.Writer, c retrypolicy.Config, res retrysim.RehearseResult) {
	fmt.Fprintf(stdout, "upstream %s: %d GET requests, %d at a time; upstream quota %s, latency %s (seed %d)\n",
		res.Upstream, res.Requests, res.Concurrency, res.Quota, res.Latency, res.Seed)
	fmt.Fprintf(stdout, "policy: %s\n", describePolicy(c))
	switch {
	case res.Pods > 1 && res.SharedQuota != "":
		fmt.Fprintf(stdout, "fleet: %d pods, skew %s, sharing SharedQuota %s\n", res.Pods, res.Skew, res.SharedQuota)
	case res.Pods > 1:
		fmt.Fprintf(stdout, "fleet: %d pods, skew %s, each with rateLimit ÷ %d\n", res.Pods, res.Skew, res.Pods)
	}
	fmt.Fprintln(stdout)
	pace := num(res.Plan.RequestsPerMinute) + "/min"
	var t table
	t.add("", "first attempts", strconv.Itoa(res.FirstAttempts))
	t.add("", "retries", strconv.Itoa(res.Retries))
	t.add("", "successes", strconv.Itoa(res.Successes))
	t.add("", "final errors", finalErrors(res.FinalErrors))
	t.add("", "429s seen", strconv.Itoa(res.Status429))
	t.add("", "start spacing", fmt.Sprintf("min %s, p50 %s, max %s", res.StartSpacing.Min, res.StartSpacing.P50, res.StartSpacing.Max))
	t.add("", "concurrency", fmt.Sprintf("peak %d, mean %s (plan %s = %s × %s)", res.PeakConcurrency,
		num(res.MeanConcurrency), num(res.Plan.MeanConcurrency), pace, res.Latency))
	t.add("", "virtual duration", fmt.Sprintf("%s (plan ≥ %s = %d at %s)", res.VirtualDuration, res.Plan.MinDuration, res.Requests, pace))
	t.write(stdout)
}

// parseSkew reads --skew A:B.
func parseSkew(s string) ([2]int, error) {
	a, b, ok := strings.Cut(s, ":")
	x, errA := strconv.Atoi(a)
	y, errB := strconv.Atoi(b)
	if !ok || errA != nil || errB != nil || x < 1 || y < 1 || x > 1000 || y > 1000 {
		return [2]int{}, fmt.Errorf("--skew %q: want A:B with whole numbers 1..1000, e.g. 10:1", s)
	}
	return [2]int{x, y}, nil
}

func finalErrors(m map[string]int) string {
	if len(m) == 0 {
		return "none"
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s %d", k, m[k])
	}
	return strings.Join(parts, ", ")
}

func num(x float64) string { return strconv.FormatFloat(x, 'f', -1, 64) }
