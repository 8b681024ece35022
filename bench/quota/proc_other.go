//go:build !linux

package main

import (
	"syscall"
	"time"
)

// dieWithParent: without Linux's parent-death signal, an interrupted run
// may leave its children behind.
func dieWithParent() *syscall.SysProcAttr { return nil }

// cpuTime is not measured without Linux's /proc.
func cpuTime(int) time.Duration { return 0 }
