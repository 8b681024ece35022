package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"
)

func runCheck(args []string, stdout, stderr io.Writer) int {
	const sub = "check"
	fs := flag.NewFlagSet(sub, flag.ContinueOnError)
	var cf clusterFlags
	cf.register(fs)
	output := outputFlag(fs)
	if err := parseNoArgs(fs, args, output); err != nil {
		return usageErr(stderr, sub, err)
	}
	c, _, err := cf.client()
	if err != nil {
		return failed(stderr, sub, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	r, err := checkCluster(ctx, c)
	if err != nil {
		return failed(stderr, sub, err)
	}
	code := exitOK
	if r.Findings > 0 {
		code = exitFindings
	}
	return report(stdout, stderr, *output, r, code, func() { printCheck(stdout, r) })
}

// printCheck writes the check report for people: one line per check, the
// opted-in namespaces and the number of findings.
func printCheck(stdout io.Writer, r CheckReport) {
	for _, ch := range r.Checks {
		mark := "ok  "
		if !ch.OK {
			mark = "FAIL"
		}
		fmt.Fprintf(stdout, "%s %s: %s\n", mark, ch.Name, wrapWords(ch.Detail, 94-len(ch.Name), "       "))
	}
	ns := "none"
	if len(r.OptedInNamespaces) > 0 {
		ns = strings.Join(r.OptedInNamespaces, ", ")
	}
	fmt.Fprintf(stdout, "namespaces opted in (retry.dev/injection=enabled): %s\n", wrapWords(ns, 46, "  "))
	fmt.Fprintf(stdout, "%d finding(s)\n", r.Findings)
}
