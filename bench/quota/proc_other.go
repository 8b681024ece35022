//go:build !linux

package main

import "syscall"

// dieWithParent: without Linux's parent-death signal, an interrupted run
// may leave its children behind.
func dieWithParent() *syscall.SysProcAttr { return nil }
