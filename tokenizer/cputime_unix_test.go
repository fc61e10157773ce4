//go:build unix

package tokenizer

import (
	"syscall"
	"time"
)

// cpuTime returns the CPU time (user and system) the process has used, and true.
func cpuTime() (time.Duration, bool) {
	var u syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &u); err != nil {
		return 0, false
	}
	return time.Duration(u.Utime.Nano() + u.Stime.Nano()), true
}
