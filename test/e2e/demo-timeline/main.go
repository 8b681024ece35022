// Command demo-timeline prints the timeline of one logical request for `make demo`
// (hack/demo.sh): what the demo app sent and got back (its /call report, which
// includes the flaky upstream's recorded arrivals) joined with the retry-sidecar's
// log lines for the same request id (the decision and the planned wait of each
// attempt).
//
//	demo-timeline -report call.json -sidecar-log sidecar.log
//
// Times in the table are measured by the upstream (when each attempt arrived);
// "planned" is the wait the sidecar decided on; "actual" is the gap between this
// arrival and the next one at the upstream.
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/retrydev/retry-operator/test/e2e/wire"
)

// report is the demo app's /call answer (test/e2e/demo-app).
type report = wire.Report

// decision is one retry-sidecar log line about an attempt (README, "The sidecar", Logs).
type decision struct {
	Msg        string `json:"msg"`
	RequestID  string `json:"request_id"`
	Attempt    int    `json:"attempt"`
	Decision   string `json:"decision"`
	Delay      string `json:"delay"` // Go notation, "500ms" (docs/sidecar.md#logs)
	Outcome    string `json:"outcome"`
	RetryAfter string `json:"retry_after"`
}

func main() {
	reportFile := flag.String("report", "", "the demo app's /call JSON answer")
	logFile := flag.String("sidecar-log", "", "the retry-sidecar's log (kubectl logs ... -c retry-sidecar)")
	flag.Parse()
	if err := run(*reportFile, *logFile); err != nil {
		fmt.Fprintln(os.Stderr, "demo-timeline:", err)
		os.Exit(1)
	}
}

func run(reportFile, logFile string) error {
	b, err := os.ReadFile(reportFile)
	if err != nil {
		return err
	}
	var r report
	if err := json.Unmarshal(b, &r); err != nil {
		return fmt.Errorf("%s: %w: %s", reportFile, err, b)
	}
	if r.Error != "" {
		return fmt.Errorf("the demo app's call failed: %s", r.Error)
	}
	decisions := readDecisions(logFile, r.RequestID)

	fmt.Printf("  %s %s   (X-Request-Id %s)\n\n", r.Method, r.URL, r.RequestID)
	w := tabwriter.NewWriter(os.Stdout, 0, 0, 3, ' ', 0)
	fmt.Fprintln(w, "  attempt\tarrived at upstream\tupstream answered\tsidecar decided\tplanned wait\tactual wait (upstream)")
	for i, a := range r.Arrivals {
		answer := strconv.Itoa(a.Status)
		if a.RetryAfter != "" {
			answer += " Retry-After: " + a.RetryAfter
		}
		at := "+" + fmtDur(a.At.Sub(r.Arrivals[0].At))
		decided, planned, actual := "", "", ""
		if d, ok := decisions[i+1]; ok {
			decided = d.Decision
			switch {
			case d.Decision == "retry" && (d.RetryAfter == "seconds" || d.RetryAfter == "date"):
				decided = "retry after the server's hint"
			case d.Decision == "retry":
				decided = "retry after local backoff"
			case d.Outcome != "":
				decided = "stop: " + d.Outcome
			}
			if d.Decision == "retry" {
				if delay, err := time.ParseDuration(d.Delay); err == nil {
					planned = fmtDur(delay)
				}
			}
		}
		if i+1 < len(r.Arrivals) {
			actual = fmtDur(r.Arrivals[i+1].At.Sub(a.At))
		}
		fmt.Fprintf(w, "  %d\t%s\t%s\t%s\t%s\t%s\n", i+1, at, answer, decided, planned, actual)
	}
	if err := w.Flush(); err != nil {
		return err
	}
	fmt.Printf("\n  the app got: %d, X-Retry-Outcome: %s, X-Retry-Attempts: %s, after %s end to end\n",
		r.Status, r.Headers["X-Retry-Outcome"], r.Headers["X-Retry-Attempts"], fmtDur(time.Duration(r.ElapsedMillis)*time.Millisecond))
	if len(decisions) == 0 {
		fmt.Println("  (no sidecar log lines for this request id: planned waits unknown)")
	}
	return nil
}

// readDecisions returns the sidecar's "retry attempt" lines of one request, by attempt.
func readDecisions(file, requestID string) map[int]decision {
	out := map[int]decision{}
	f, err := os.Open(file)
	if err != nil {
		return out
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.Contains(line, requestID) {
			continue
		}
		var d decision
		if json.Unmarshal([]byte(line), &d) == nil && d.RequestID == requestID && d.Msg == "retry attempt" {
			out[d.Attempt] = d
		}
	}
	return out
}

func fmtDur(d time.Duration) string {
	return fmt.Sprintf("%.3fs", d.Seconds())
}
