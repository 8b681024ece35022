package redistest

import (
	"os/exec"
	"syscall"
)

// setParentDeathSignal kills the server with the test binary, should the test
// die without running its cleanups.
func setParentDeathSignal(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
