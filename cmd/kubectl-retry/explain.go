package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"
)

func runExplain(args []string, stdout, stderr io.Writer) int {
	const sub = "explain"
	fs := flag.NewFlagSet(sub, flag.ContinueOnError)
	var cf clusterFlags
	cf.register(fs)
	host := fs.String("host", "", "a host (host, host:port or URL) the pod calls: which policy and upstream apply")
	output := outputFlag(fs)
	pos, err := parseCommand(fs, args, output)
	if err != nil {
		return usageErr(stderr, sub, err)
	}
	if len(pos) != 1 {
		return usageErr(stderr, sub, fmt.Errorf("want one argument pod/NAME"))
	}
	name, ok := strings.CutPrefix(pos[0], "pod/")
	if !ok {
		name, ok = strings.CutPrefix(pos[0], "pods/")
	}
	if !ok || name == "" {
		return usageErr(stderr, sub, fmt.Errorf("%q: want pod/NAME", pos[0]))
	}
	c, ns, err := cf.client()
	if err != nil {
		return failed(stderr, sub, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ex, err := explainPod(ctx, c, ns, name, *host)
	if err != nil {
		return failed(stderr, sub, err)
	}
	code := exitOK
	if len(ex.Findings) > 0 {
		code = exitFindings
	}
	return report(stdout, stderr, *output, ex, code, func() { printExplanation(stdout, ex) })
}

// printExplanation writes ex for people: the pod's injection, the policies
// selecting it, the host, the findings.
func printExplanation(stdout io.Writer, ex Explanation) {
	fmt.Fprintf(stdout, "pod %s: %s\n", ex.Pod, wrap(ex.Detail, 90, "  "))
	if len(ex.Policies) == 0 {
		fmt.Fprintln(stdout, "policies: none in the namespace selects this pod")
	} else {
		fmt.Fprintln(stdout, "policies selecting this pod:")
		var t table
		t.add("", "  POLICY", "ACCEPTED", "REASON", "RENDERED", "UPSTREAMS")
		for _, p := range ex.Policies {
			note := ""
			if p.Accepted != "True" && p.Message != "" {
				note = p.Message
			}
			t.add(note, "  "+p.Name, p.Accepted, dash(p.Reason), yesNo(p.Rendered), strings.Join(p.Upstreams, ","))
		}
		t.write(stdout)
	}
	if h := ex.Host; h != nil {
		prefix := "host " + h.Host + ": "
		fmt.Fprintf(stdout, "%s%s\n", prefix, wrapWords(h.Detail, max(40, 98-len(prefix)), "  "))
	}
	for _, f := range ex.Findings {
		fmt.Fprintf(stdout, "finding: %s\n", wrapWords(f, 88, "  "))
	}
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// wrapWords breaks text at blanks so no line passes width; continuation lines
// get indent.
func wrapWords(s string, width int, indent string) string {
	var lines []string
	line := ""
	for _, w := range strings.Fields(s) {
		switch {
		case line == "":
			line = w
		case len(line)+1+len(w) > width:
			lines = append(lines, line)
			line = indent + w
		default:
			line += " " + w
		}
	}
	return strings.Join(append(lines, line), "\n")
}
