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
	pos, err := parseFlags(fs, args)
	if err != nil {
		return usageErr(stderr, sub, err)
	}
	if err := checkOutput(*output); err != nil {
		return usageErr(stderr, sub, err)
	}
	if len(pos) > 0 {
		return usageErr(stderr, sub, fmt.Errorf("unexpected argument %q", pos[0]))
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
	if *output == "json" {
		if err := writeJSON(stdout, r); err != nil {
			return exitFindings
		}
		return code
	}
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
	return code
}
