package main

import "syscall"

// dieWithParent makes a child process get SIGKILL when this program ends,
// however it ends (an interrupted run leaves no sidecar or redis-server
// behind).
func dieWithParent() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
