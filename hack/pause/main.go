/*
Copyright 2026.

Licensed under the Apache License, Version 2.0 (the "License");
you may not use this file except in compliance with the License.
You may obtain a copy of the License at

    http://www.apache.org/licenses/LICENSE-2.0

Unless required by applicable law or agreed to in writing, software
distributed under the License is distributed on an "AS IS" BASIS,
WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
See the License for the specific language governing permissions and
limitations under the License.
*/

// Command pause is the sandbox ("infra") container of the local cluster's pods:
// it holds the pod's namespaces open and does nothing else. It is built from
// source because no pause image can be pulled on machines without a registry.
//
// It blocks until SIGTERM or SIGINT and then exits 0. When it runs as PID 1 of
// a shared PID namespace it also reaps exited children on SIGCHLD, like the
// upstream pause does, so zombies do not pile up.
package main

import (
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "-v" {
		fmt.Println("pause (retry-operator local cluster)")
		return
	}
	signals := make(chan os.Signal, 8)
	signal.Notify(signals, syscall.SIGTERM, syscall.SIGINT, syscall.SIGCHLD)
	for sig := range signals {
		if sig == syscall.SIGCHLD {
			reap()
			continue
		}
		return
	}
}

// reap collects every child that has exited, without blocking.
func reap() {
	for {
		var status syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &status, syscall.WNOHANG, nil)
		if pid <= 0 || err != nil {
			return
		}
	}
}
