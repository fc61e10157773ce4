//go:build unix

package main

import (
	"bytes"
	"os"
	"syscall"
	"testing"
	"time"
)

// TestInterruptStopsTheRun: SIGINT closes the run's stop channel (train.Run then saves and returns
// "interrupted at step N, saved", see train's TestStopSavesAndSaysWhere) instead of ending the
// process.
func TestInterruptStopsTheRun(t *testing.T) {
	stop, done := stopOnSignal(&bytes.Buffer{})
	defer done()
	if err := syscall.Kill(os.Getpid(), syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	select {
	case <-stop:
	case <-time.After(10 * time.Second):
		t.Fatal("SIGINT did not ask the run to stop")
	}
}
