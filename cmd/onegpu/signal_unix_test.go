//go:build unix

package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/onegpu/onegpu/platform"
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

// TestCompareRemovesItsFolderOnSIGTERM: a SIGTERM while the reference runs stops it (its process
// is killed, not left running) and the comparison, and the temporary folder under $TMPDIR is
// removed (before: the process died at once and left onegpu-compare-*).
func TestCompareRemovesItsFolderOnSIGTERM(t *testing.T) {
	t.Setenv(platform.EnvBackend, "")
	t.Setenv(platform.EnvPlugin, "")
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	marks := t.TempDir()
	started := filepath.Join(marks, "started")
	script := filepath.Join(marks, "reference.sh")
	// The reference: says it started, then sleeps as a long JAX run would (exec: the same process).
	if err := os.WriteFile(script, []byte("echo $$ > "+started+"\nexec sleep 60\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		done <- runCompare([]string{"--config", "--model mlp --batch 64", "--steps", "1", "--python", "/bin/sh", "--script", script}, &bytes.Buffer{}, &bytes.Buffer{})
	}()
	deadline := time.Now().Add(60 * time.Second)
	var pid []byte
	for len(pid) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the reference did not start in 60 s")
		}
		time.Sleep(50 * time.Millisecond)
		pid, _ = os.ReadFile(started)
	}
	if err := syscall.Kill(os.Getpid(), syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "compare stopped by a signal during configuration 1 of 1") {
			t.Errorf("compare: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("compare did not stop in 30 s after SIGTERM")
	}
	if left, _ := filepath.Glob(filepath.Join(tmp, "onegpu-compare-*")); len(left) > 0 {
		t.Errorf("left behind: %v", left)
	}
	child, _ := strconv.Atoi(strings.TrimSpace(string(pid)))
	if child > 0 && syscall.Kill(child, 0) == nil {
		t.Errorf("the reference (pid %d) still runs", child)
	}
}
