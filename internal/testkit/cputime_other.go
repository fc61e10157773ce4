//go:build !unix

package testkit

import (
	"testing"
	"time"
)

// CPUTime returns the CPU time the process has used: 0 here, where the system does not report it
// through Go's standard library.
func CPUTime(t testing.TB) time.Duration { return 0 }
