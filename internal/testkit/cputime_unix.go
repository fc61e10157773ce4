//go:build unix

package testkit

import (
	"syscall"
	"testing"
	"time"
)

// CPUTime returns the CPU time the process has used (user and system, all threads): steadier than
// wall time on a shared machine. It is 0 where the system does not report it.
func CPUTime(t testing.TB) time.Duration {
	var usage syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &usage); err != nil {
		t.Fatal(err)
	}
	return time.Duration(usage.Utime.Nano() + usage.Stime.Nano())
}
