package main

import (
	"bytes"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// go test ./cmd/kubectl-retry -run TestGolden -update
var update = flag.Bool("update", false, "rewrite testdata/golden/*.golden")

const (
	policies = "testdata/policies.yaml"
	start    = "--start=2026-11-30T12:00:00Z"
	routes   = "testdata/routes.yaml"
)

// goldenCases are whole command lines whose exit code, stdout and stderr are
// pinned in testdata/golden/<name>.golden. The simulate cases are the worked
// examples of docs/kubectl-retry.md.
var goldenCases = map[string][]string{
	// Server asks 30 s, local backoff is 8 s, 12 s of deadline left: deferred
	// now with X-Retry-Not-Before +30s, not a retry at 12 s.
	"simulate-server-wait-past-deadline-is-deferred": {"simulate", "-f", policies, "--upstream", "slow-backoff",
		"--deadline", "12s", "--responses", "429 ra=30", start},
	// Retry-After: 10 on the second attempt: the wait is 10 s plus spread, never less.
	"simulate-retry-after-10-on-retry-2-waits-10s": {"simulate", "-f", policies, "--upstream", "payments-api",
		"--responses", "503, 429 ra=10, 200", start},
	// The same hint on the answer to the second retry (attempt 3): local backoff
	// there is at most 4 s, the wait is still 10 s and more.
	"simulate-retry-after-10-on-attempt-3-waits-10s": {"simulate", "-f", policies, "--upstream", "payments-api",
		"--responses", "503, 503, 429 ra=10, 200", start},
	"simulate-hint-60s-over-max-wait-30s-is-deferred": {"simulate", "-f", policies, "--upstream", "payments-api",
		"--responses", "429 ra=60", start},
	"simulate-503-on-attempt-4-of-4-is-exhausted": {"simulate", "-f", policies, "--upstream", "payments-api",
		"--responses", "503, 503, 503, 503", start},
	"simulate-post-without-key-is-not-replayable": {"simulate", "-f", policies, "--upstream", "payments-api",
		"--method", "POST", "--responses", "503, 200", start},
	"simulate-post-with-idempotency-key-is-retried-json": {"simulate", "-f", policies, "--upstream", "payments-api",
		"--method", "POST", "--header", "Idempotency-Key=order-42", "--responses", "503, 200", start, "-o", "json"},
	"simulate-http-date-with-skew-refused-malformed-timeout": {"simulate", "-f", policies, "--upstream", "payments-api",
		"--responses", `503 ra="Mon, 30 Nov 2026 12:00:05 GMT" date="Mon, 30 Nov 2026 11:59:58 GMT", refused, 503 ra=soon, timeout`, start},
	"simulate-per-try-timeout-is-not-an-admission-wait": {"simulate", "-f", policies, "--upstream", "payments-api",
		"--responses", "timeout, 200", start},
	"simulate-per-try-timeout-is-not-an-admission-wait-json": {"simulate", "-f", policies, "--upstream", "payments-api",
		"--responses", "timeout, 200", start, "-o", "json"},
	"simulate-deadline-without-unit": {"simulate", "-f", policies, "--upstream", "payments-api", "--deadline", "5", "--responses", "503", start},
	"simulate-timeout-runs-into-the-deadline": {"simulate", "-f", policies, "--upstream", "slow-backoff",
		"--deadline", "5s", "--responses", "timeout", start, "-o", "json"},
	"simulate-ratelimit-headers-are-passed-on": {"simulate", "-f", policies, "--upstream", "payments-api",
		"--responses", "200 ratelimit-remaining=0 ratelimit-reset=30", start},
	"simulate-seed-changes-the-jitter": {"simulate", "-f", policies, "--upstream", "payments-api",
		"--responses", "503, 503, 200", "--seed", "7", start},
	// Retries spend rateLimit tokens too: the wait for one shows as admission.
	"simulate-retries-wait-for-rate-limit-tokens": {"simulate", "-f", policies, "--upstream", "paced",
		"--responses", "503, 503, 200", start},

	// Gateway API route rules (docs/gateway-api.md): attempts are retries,
	// the backoff an exact minimum, backendRequest each attempt's bound.
	"simulate-route-rule-503-then-200-waits-the-backoff": {"simulate", "-f", routes, "--upstream", "payments-retries/rules/0",
		"--responses", "503, 503, 200", start},
	"simulate-route-rule-attempts-2-is-3-transmissions": {"simulate", "-f", routes, "--upstream", "payments-retries/rules/0",
		"--responses", "503, 503, 503", start},
	"simulate-route-linkerd-annotations": {"simulate", "-f", routes, "--upstream", "ledger-linkerd",
		"--responses", "502, timeout, 200", start},
	"simulate-route-needs-a-rule-name": {"simulate", "-f", routes, "--upstream", "payments-retries",
		"--responses", "503", start},

	// gRPC calls (docs/grpc.md): the example of docs/kubectl-retry.md, then
	// every row of docs/grpc.md#what-is-retried-when.
	"simulate-grpc-unavailable-then-pushback-800-then-ok":      grpcSim("/shop.v1.Payments/GetPayment", "UNAVAILABLE, UNAVAILABLE pushback=800, OK"),
	"simulate-grpc-backoff-longer-than-pushback-sets-the-wait": grpcSim("/shop.v1.Catalogue/List", "UNAVAILABLE, UNAVAILABLE, UNAVAILABLE pushback=0, OK"),
	"simulate-grpc-pushback-over-max-wait-is-deferred":         grpcSim("/shop.v1.Catalogue/List", "UNAVAILABLE pushback=3000"),
	"simulate-grpc-pushback-past-the-deadline-is-deferred": append(grpcSim("/shop.v1.Catalogue/List", "UNAVAILABLE pushback=1500"),
		"--deadline", "1500ms"),
	"simulate-grpc-backoff-past-the-deadline-is-deadline-exceeded": append(grpcSim("/shop.v1.Catalogue/List", "UNAVAILABLE"),
		"--deadline", "150ms"),
	"simulate-grpc-negative-pushback-is-not-retried":     grpcSim("/shop.v1.Catalogue/List", "UNAVAILABLE pushback=-1, OK"),
	"simulate-grpc-garbage-pushback-is-not-retried":      grpcSim("/shop.v1.Catalogue/List", "UNAVAILABLE pushback=soon, OK"),
	"simulate-grpc-method-not-replayable-is-not-retried": grpcSim("/shop.v1.Payments/Charge", "UNAVAILABLE, OK"),
	"simulate-grpc-status-not-listed-is-not-retried":     grpcSim("/shop.v1.Payments/GetPayment", "RESOURCE_EXHAUSTED pushback=100, OK"),
	"simulate-grpc-four-unavailable-is-exhausted":        grpcSim("/shop.v1.Payments/GetPayment", "UNAVAILABLE, UNAVAILABLE, UNAVAILABLE, UNAVAILABLE"),
	"simulate-grpc-nested-call-is-not-multiplied": append(grpcSim("/shop.v1.Payments/GetPayment", "UNAVAILABLE, OK"),
		"--header", "X-Retry-Attempt=1"),
	"simulate-grpc-method-defaults-to-the-first-replayable-one": grpcSim("", "UNAVAILABLE, OK"),
	"simulate-grpc-method-flag-takes-a-grpc-path": append(grpcSim("", "UNAVAILABLE pushback=0, OK"),
		"--method", "/shop.v1.Catalogue/List"),
	"simulate-grpc-pushback-800-json": append(grpcSim("/shop.v1.Payments/GetPayment", "UNAVAILABLE pushback=800, OK"), "-o", "json"),

	// Usage errors: one line naming the token or flag, exit 2.
	"simulate-grpc-http-status-among-grpc-names-the-token": grpcSim("/shop.v1.Payments/GetPayment", "UNAVAILABLE, 503, OK"),
	"simulate-grpc-status-among-http-names-the-token":      grpcSim("/shop.v1.Payments/GetPayment", "503, UNAVAILABLE"),
	"simulate-grpc-timeout-token-names-the-token":          grpcSim("/shop.v1.Payments/GetPayment", "UNAVAILABLE, timeout"),
	"simulate-grpc-lower-case-name":                        grpcSim("/shop.v1.Payments/GetPayment", "unavailable"),
	"simulate-grpc-unknown-attribute":                      grpcSim("/shop.v1.Payments/GetPayment", "UNAVAILABLE ra=2"),
	"simulate-grpc-needs-a-method-when-the-policy-lists-none": {"simulate", "-f", policies, "--upstream", "payments-api",
		"--responses", "UNAVAILABLE, OK", start},
	"simulate-grpc-method-malformed":          grpcSim("shop.v1.Payments.GetPayment", "UNAVAILABLE, OK"),
	"simulate-grpc-method-with-http-statuses": grpcSim("/shop.v1.Payments/GetPayment", "503, 200"),
	"simulate-grpc-takes-no-http-method": append(grpcSim("/shop.v1.Payments/GetPayment", "UNAVAILABLE, OK"),
		"--method", "POST"),
	"simulate-malformed-token-names-token-and-position": {"simulate", "-f", policies, "--upstream", "payments-api",
		"--responses", "503, 429 rb=2, 200", start},
	"simulate-bad-status-token": {"simulate", "-f", policies, "--upstream", "payments-api",
		"--responses", "503, 50x", start},
	"simulate-unknown-upstream":          {"simulate", "-f", policies, "--upstream", "nope", "--responses", "503", start},
	"simulate-upstream-needed":           {"simulate", "-f", policies, "--responses", "503", start},
	"simulate-script-too-short":          {"simulate", "-f", policies, "--upstream", "payments-api", "--responses", "503", start},
	"simulate-missing-file":              {"simulate", "-f", "testdata/absent.yaml", "--responses", "503", start},
	"simulate-deadline-below-per-try":    {"simulate", "-f", policies, "--upstream", "payments-api", "--deadline", "5s", "--responses", "503", start},
	"simulate-invalid-policy-field-path": {"simulate", "-f", "testdata/invalid.yaml", "--responses", "503", start},
	"unknown-subcommand":                 {"simulte"},

	// The seed plan, paced by rateLimit 90/min under a 120/m quota: exit 0, no 429.
	"rehearse-seed-plan-paced": {"rehearse", "-f", "testdata/seed-plan.yaml", "--upstream", "paced",
		"--requests", "600", "--quota", "120/m", "--latency", "2s"},
	"rehearse-seed-plan-paced-json": {"rehearse", "-f", "testdata/seed-plan.yaml", "--upstream", "paced",
		"--requests", "600", "--quota", "120/m", "--latency", "2s", "-o", "json"},
	// Without rateLimit: 429s and deferred requests are findings, exit 1.
	"rehearse-seed-plan-unpaced-has-findings": {"rehearse", "-f", "testdata/seed-plan.yaml", "--upstream", "unpaced",
		"--requests", "600", "--quota", "120/m", "--latency", "2s"},
	"rehearse-twenty-reads": {"rehearse", "-f", "testdata/seed-plan.yaml", "--upstream", "paced", "--quota", "120/m",
		"--concurrency", "3", "-o", "json"},
	// The seed plan for ten pods with 10:1 skew: one SharedQuota keeps the
	// 90/min target for the fleet; today's split of rateLimit sheds the busy pod.
	"rehearse-seed-plan-fleet-shared-quota": {"rehearse", "-f", "testdata/seed-fleet.yaml", "--upstream", "shared",
		"--requests", "600", "--quota", "120/m", "--latency", "2s", "--pods", "10", "--skew", "10:1"},
	"rehearse-seed-plan-fleet-split-rate-limit": {"rehearse", "-f", "testdata/seed-fleet.yaml", "--upstream", "split",
		"--requests", "600", "--quota", "120/m", "--latency", "2s", "--pods", "10", "--skew", "10:1"},
	"rehearse-bad-skew": {"rehearse", "-f", "testdata/seed-fleet.yaml", "--upstream", "shared", "--quota", "120/m",
		"--pods", "10", "--skew", "10-1"},
	"rehearse-bad-quota":    {"rehearse", "-f", "testdata/seed-plan.yaml", "--upstream", "paced", "--quota", "120/d"},
	"rehearse-quota-needed": {"rehearse", "-f", "testdata/seed-plan.yaml", "--upstream", "paced"},
}

// grpcSim is simulate of a gRPC call to the payments-grpc upstream; method ""
// leaves --grpc-method out.
func grpcSim(method, responses string) []string {
	args := []string{"simulate", "-f", policies, "--upstream", "payments-grpc", "--responses", responses, start}
	if method != "" {
		args = append(args, "--grpc-method", method)
	}
	return args
}

func TestGolden(t *testing.T) {
	for name, args := range goldenCases {
		t.Run(name, func(t *testing.T) {
			got := runCapture(args)
			golden := filepath.Join("testdata", "golden", name+".golden")
			if *update {
				if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run with -update to create it)", err)
			}
			if got != string(want) {
				t.Fatalf("%s is stale (go test ./cmd/kubectl-retry -run TestGolden -update); got:\n%s", golden, got)
			}
		})
	}
}

func TestGoldenFilesHaveACase(t *testing.T) {
	files, _ := filepath.Glob(filepath.Join("testdata", "golden", "*.golden"))
	var stale []string
	for _, f := range files {
		if _, ok := goldenCases[strings.TrimSuffix(filepath.Base(f), ".golden")]; !ok {
			stale = append(stale, f)
		}
	}
	sort.Strings(stale)
	if len(stale) > 0 {
		t.Fatalf("golden files without a case (delete them): %v", stale)
	}
}

func TestHumanOutputFitsIn100Columns(t *testing.T) {
	for name, args := range goldenCases {
		var stdout bytes.Buffer
		run(args, &stdout, &bytes.Buffer{})
		for i, line := range strings.Split(stdout.String(), "\n") {
			if n := len([]rune(line)); n > 100 {
				t.Errorf("%s line %d is %d columns: %q", name, i+1, n, line)
			}
		}
	}
}

// runCapture runs the command and renders its exit code and both streams.
func runCapture(args []string) string {
	var stdout, stderr bytes.Buffer
	code := run(args, &stdout, &stderr)
	return fmt.Sprintf("$ kubectl retry %s\nexit %d\n--- stdout\n%s--- stderr\n%s", quoteArgs(args), code, stdout.String(), stderr.String())
}

func quoteArgs(args []string) string {
	q := make([]string, len(args))
	for i, a := range args {
		if strings.ContainsAny(a, ` ",=`) && !strings.HasPrefix(a, "--") {
			a = "'" + a + "'"
		}
		q[i] = a
	}
	return strings.Join(q, " ")
}

// The usage lists every flag of every subcommand (walked from each one's
// -h), and simulate -h every kind of response token.
func TestUsageListsEveryRegisteredFlag(t *testing.T) {
	var top bytes.Buffer
	if code := run([]string{"--help"}, &top, io.Discard); code != exitOK {
		t.Fatalf("--help: exit %d", code)
	}
	for _, sub := range []string{"simulate", "rehearse", "explain", "check"} {
		var help bytes.Buffer
		if code := run([]string{sub, "-h"}, io.Discard, &help); code != exitOK {
			t.Fatalf("%s -h: exit %d", sub, code)
		}
		_, flags, _ := strings.Cut(help.String(), "\nFlags of "+sub+":\n")
		n := 0
		for _, line := range strings.Split(flags, "\n") {
			name, ok := strings.CutPrefix(line, "  -")
			if !ok {
				continue
			}
			name, _, _ = strings.Cut(name, " ")
			n++
			dashes := "--"
			if len(name) == 1 {
				dashes = "-"
			}
			if !strings.Contains(top.String(), dashes+name+" ") && !strings.Contains(top.String(), dashes+name+"|") {
				t.Errorf("kubectl retry's usage lacks %s%s of %s:\n%s", dashes, name, sub, top.String())
			}
		}
		if n < 4 {
			t.Errorf("%s -h lists %d flags; the walk found nothing to check", sub, n)
		}
	}
	var help bytes.Buffer
	run([]string{"simulate", "-h"}, io.Discard, &help)
	for _, token := range []string{"  200, 503", "  429 ra=2", `ra="Mon, 30 Nov 2026 12:00:05 GMT"`, "  date=", "  ratelimit-remaining=0 ratelimit-reset=30", "  timeout ", "  refused ",
		"  OK, UNAVAILABLE, RESOURCE_EXHAUSTED, DEADLINE_EXCEEDED", "  UNAVAILABLE pushback=800 ", "--grpc-method"} {
		if !strings.Contains(help.String(), token) {
			t.Errorf("simulate -h lacks the response token %q", token)
		}
	}
}
