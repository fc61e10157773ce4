package testkit

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// maxTrackedExecutable is the size above which a tracked executable fails TestNoLargeExecutableTracked:
// scripts are a few KiB, and a compiled Go program is tens of MiB (a 23.6 MB build of
// examples/customoptimizer was committed once).
const maxTrackedExecutable = 1 << 20

// TestNoLargeExecutableTracked fails when the repository tracks an executable over 1 MiB: a build
// output committed by mistake (`go build ./examples/x` writes x at the repository root; .gitignore
// lists those names). Skipped outside a git checkout (a module copy, a tarball).
func TestNoLargeExecutableTracked(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git is not installed")
	}
	top, err := exec.Command("git", "rev-parse", "--show-toplevel").Output()
	if err != nil {
		t.Skipf("not in a git checkout: %v", err)
	}
	root := strings.TrimSpace(string(top))
	index, err := exec.Command("git", "-C", root, "ls-files", "--stage", "-z").Output()
	if err != nil {
		t.Fatalf("git ls-files: %v", err)
	}
	found, err := largeExecutables(root, index, maxTrackedExecutable)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range found {
		t.Errorf("tracked executable over 1 MiB: %s; remove it (git rm --cached) and ignore it in .gitignore", f)
	}
}

// TestLargeExecutables holds largeExecutables to hand-made index entries: executables are found by
// mode or by header, data files, small executables, links and files missing from the work tree are not.
func TestLargeExecutables(t *testing.T) {
	root := t.TempDir()
	big := func(header string) []byte { return append([]byte(header), make([]byte, 2000)...) }
	files := map[string][]byte{
		"elf-no-x-bit":  big("\x7fELF"),
		"macho":         big("\xcf\xfa\xed\xfe"),
		"windows.exe":   big("MZ"),
		"x-bit-text":    big("#!/bin/sh\n"),
		"data.bin":      big("PK"),
		"small-elf":     []byte("\x7fELF tiny"),
		"small-script":  []byte("#!/bin/sh\necho hi\n"),
		"dir/nested.so": big("\x7fELF"),
	}
	for name, data := range files {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(root, name)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	var index bytes.Buffer
	for _, e := range []struct{ mode, path string }{
		{"100644", "elf-no-x-bit"}, {"100644", "macho"}, {"100644", "windows.exe"}, {"100755", "x-bit-text"},
		{"100644", "data.bin"}, {"100755", "small-elf"}, {"100755", "small-script"}, {"100755", "dir/nested.so"},
		{"100755", "deleted-from-work-tree"}, {"120000", "link"}, {"160000", "submodule"},
	} {
		fmt.Fprintf(&index, "%s 0123456789abcdef0123456789abcdef01234567 0\t%s\x00", e.mode, e.path)
	}
	got, err := largeExecutables(root, index.Bytes(), 1000)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"elf-no-x-bit (2004 bytes, an executable's header)",
		"macho (2004 bytes, an executable's header)",
		"windows.exe (2002 bytes, an executable's header)",
		"x-bit-text (2010 bytes, mode 100755)",
		"dir/nested.so (2004 bytes, mode 100755)",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("largeExecutables found\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if _, err := largeExecutables(root, []byte("100644 no tab\x00"), 1000); err == nil {
		t.Error("largeExecutables accepted a malformed index line")
	}
}

// executableHeaders are the first bytes of ELF, PE (Windows) and Mach-O (thin and universal) files:
// a compiled program is found by its header even when its mode lost the executable bit.
var executableHeaders = []string{"\x7fELF", "MZ", "\xfe\xed\xfa\xce", "\xfe\xed\xfa\xcf", "\xce\xfa\xed\xfe", "\xcf\xfa\xed\xfe", "\xca\xfe\xba\xbe"}

// largeExecutables reads the output of `git ls-files --stage -z` and returns the regular files
// over limit bytes, as they are in the work tree under root, that are executable by their mode
// (100755) or their header, each as "path (N bytes, why)". Links, submodules and files missing
// from the work tree are skipped.
func largeExecutables(root string, index []byte, limit int64) ([]string, error) {
	var found []string
	for _, entry := range strings.Split(strings.TrimSuffix(string(index), "\x00"), "\x00") {
		if entry == "" {
			continue
		}
		meta, path, ok := strings.Cut(entry, "\t")
		mode, _, _ := strings.Cut(meta, " ")
		if !ok || path == "" {
			return nil, fmt.Errorf("git ls-files --stage: unexpected entry %q", entry)
		}
		if mode != "100644" && mode != "100755" {
			continue
		}
		file, err := os.Open(filepath.Join(root, filepath.FromSlash(path)))
		if errors.Is(err, os.ErrNotExist) {
			continue
		} else if err != nil {
			return nil, err
		}
		info, err := file.Stat()
		header := make([]byte, 4)
		if err == nil {
			_, err = io.ReadFull(file, header)
			if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
				err = nil
			}
		}
		file.Close()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		if info.Size() <= limit {
			continue
		}
		why := ""
		if mode == "100755" {
			why = "mode 100755"
		}
		for _, h := range executableHeaders {
			if why == "" && bytes.HasPrefix(header, []byte(h)) {
				why = "an executable's header"
			}
		}
		if why != "" {
			found = append(found, fmt.Sprintf("%s (%d bytes, %s)", path, info.Size(), why))
		}
	}
	return found, nil
}
