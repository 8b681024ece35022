package main

import "io"

func runExplain(args []string, stdout, stderr io.Writer) int { return exitUsage }
func runCheck(args []string, stdout, stderr io.Writer) int   { return exitUsage }
