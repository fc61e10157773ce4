package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/onegpu/onegpu/internal/testkit"
)

// TestOutputPaths: checkOutputFile and checkOutputFolder refuse what cannot take the output,
// naming the flag and the path, leave nothing behind, and accept what can: a new file in a
// writable folder, an existing file (unchanged), a named pipe (not opened), a folder to create.
func TestOutputPaths(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "existing.json")
	if err := os.WriteFile(file, []byte("keep me"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("loop", filepath.Join(dir, "loop")); err != nil {
		t.Fatal(err)
	}
	fifo := filepath.Join(dir, "fifo")
	if err := testkit.MakeFIFO(fifo); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		path, want string // want "" for a path that must be accepted
	}{
		{filepath.Join(dir, "new.json"), ""},
		{file, ""},
		{fifo, ""},
		{dir, "--json-file " + dir + ": is a folder: name a file, e.g. " + filepath.Join(dir, "result.json")},
		{filepath.Join(dir, "loop"), "runs into a loop of symbolic links"},
		{filepath.Join(dir, "loop", "x.json"), "runs into a loop of symbolic links"},
		{filepath.Join(dir, "missing", "x.json"), "the folder " + filepath.Join(dir, "missing") + " does not exist"},
		{filepath.Join(file, "x.json"), file + " is not a folder"},
	} {
		err := checkOutputFile("json-file", c.path)
		if c.want == "" && err != nil || c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), c.path)) {
			t.Errorf("checkOutputFile(%s) = %v, want %q", c.path, err, c.want)
		}
	}
	for _, c := range []struct {
		path, want string
	}{
		{dir, ""},
		{filepath.Join(dir, "a", "b"), ""},
		{file, file + " is not a folder"},
		{filepath.Join(file, "sub"), "goes through a file, not a folder"},
		{filepath.Join(dir, "loop", "sub"), "runs into a loop of symbolic links"},
	} {
		err := checkOutputFolder("keep", c.path)
		if c.want == "" && err != nil || c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want) || !strings.HasPrefix(err.Error(), "--keep "+c.path)) {
			t.Errorf("checkOutputFolder(%s) = %v, want %q", c.path, err, c.want)
		}
	}
	if b, err := os.ReadFile(file); err != nil || string(b) != "keep me" {
		t.Errorf("the existing file changed: %q, %v", b, err)
	}
	entries, err := os.ReadDir(dir)
	if err != nil || len(entries) != 3 {
		t.Errorf("the checks left files behind or created folders: %v, %v", entries, err)
	}
	if os.Geteuid() != 0 { // root writes anywhere
		ro := filepath.Join(dir, "ro")
		if err := os.Mkdir(ro, 0o555); err != nil {
			t.Fatal(err)
		}
		if err := checkOutputFile("plot", filepath.Join(ro, "x.png")); err == nil || !strings.Contains(err.Error(), "is not writable") {
			t.Errorf("a read-only folder: %v", err)
		}
	}
}

// TestCheckNotRead: an output that would replace a file the run reads is refused, naming both
// flags: the file given to a flag (also through a link), a file in a folder given to one; a new
// file, an earlier plot (a PNG image) in such a folder, and a file elsewhere are accepted.
func TestCheckNotRead(t *testing.T) {
	root := t.TempDir()
	model := filepath.Join(root, "model")
	if err := os.Mkdir(model, 0o755); err != nil {
		t.Fatal(err)
	}
	files := map[string]string{filepath.Join(model, "config.json"): "{}", filepath.Join(model, "old.png"): "\x89PNG\r\n\x1a\nimage",
		filepath.Join(root, "data.npy"): "tokens", filepath.Join(root, "elsewhere.png"): "not an image"}
	for path, text := range files {
		if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	link := filepath.Join(root, "link.png")
	if err := os.Symlink(filepath.Join(model, "config.json"), link); err != nil {
		t.Skipf("no symbolic links here: %v", err)
	}
	reads := map[string]string{"init-hf": model, "data": filepath.Join(root, "data.npy"), "tokenizer": ""}
	for _, c := range []struct{ file, want string }{
		{filepath.Join(model, "config.json"), "--plot " + filepath.Join(model, "config.json") + " is a file of --init-hf " + model + ", which the run reads: name another file, e.g. plot.png"},
		{link, "--plot " + link + " is a file of --init-hf " + model},
		{filepath.Join(root, "data.npy"), "is --data " + filepath.Join(root, "data.npy") + ", which the run reads"},
		{filepath.Join(model, "new.png"), ""},
		{filepath.Join(model, "old.png"), ""},
		{filepath.Join(root, "elsewhere.png"), ""},
	} {
		err := checkNotRead("plot", c.file, reads)
		if c.want == "" && err != nil || c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)) {
			t.Errorf("checkNotRead(%s) = %v, want %q", c.file, err, c.want)
		}
	}
}
