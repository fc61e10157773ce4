package filelock_test

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/onegpu/onegpu/internal/filelock"
)

// TestTryLock: a second open file of a locked path is refused until the first unlocks it.
func TestTryLock(t *testing.T) {
	if !filelock.Supported {
		t.Skip("no file locks on this system")
	}
	path := filepath.Join(t.TempDir(), "lock")
	open := func() *os.File {
		f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o666)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { f.Close() })
		return f
	}
	a, b := open(), open()
	if err := filelock.TryLock(a); err != nil {
		t.Fatalf("first lock: %v", err)
	}
	if err := filelock.TryLock(b); !errors.Is(err, filelock.ErrLocked) {
		t.Fatalf("second lock while the first holds it: %v, want ErrLocked", err)
	}
	if _, err := os.ReadFile(path); err != nil {
		t.Errorf("a locked file cannot be read by others: %v", err)
	}
	filelock.Unlock(a)
	if err := filelock.TryLock(b); err != nil {
		t.Fatalf("second lock after the first unlocked: %v", err)
	}
	filelock.Unlock(b)
	if err := filelock.Lock(a); err != nil {
		t.Fatalf("blocking lock of a free file: %v", err)
	}
	filelock.Unlock(a)
}

// TestProcessAlive: this process is alive, a child that exited is not.
func TestProcessAlive(t *testing.T) {
	if !filelock.ProcessAlive(os.Getpid()) {
		t.Error("this process is not alive")
	}
	if !filelock.Supported {
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	if filelock.ProcessAlive(cmd.Process.Pid) {
		t.Errorf("child %d exited but is alive", cmd.Process.Pid)
	}
}
