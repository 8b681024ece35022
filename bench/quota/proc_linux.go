package main

import (
	"bytes"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// dieWithParent makes a child process get SIGKILL when this program ends,
// however it ends (an interrupted run leaves no sidecar or redis-server
// behind).
func dieWithParent() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}

// cpuTime is the CPU time (user and system) process pid has used, from
// /proc/pid/stat; 0 if it cannot be read.
func cpuTime(pid int) time.Duration {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0
	}
	// The fields after the command name, which is in parentheses and may
	// hold spaces: utime and stime are the 12th and 13th of them.
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
	if len(f) < 13 {
		return 0
	}
	u, _ := strconv.ParseInt(f[11], 10, 64)
	s, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(u+s) * time.Second / clockTicks
}

// clockTicks is USER_HZ, the unit of /proc/pid/stat's times: 100 on every
// Linux architecture Go supports.
const clockTicks = 100
