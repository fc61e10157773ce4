package main

import (
	"bytes"
	"maps"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	ograph "github.com/onegpu/onegpu/graph"
	"github.com/onegpu/onegpu/internal/testkit"
)

// hfFixture is the untied Llama fixture of hf/testdata.
var hfFixture = filepath.Join("..", "..", "hf", "testdata", "llama3_untied")

// copyFolder copies the files of from into a new folder to and returns to.
func copyFolder(t *testing.T, from, to string) string {
	t.Helper()
	if err := os.MkdirAll(to, 0o755); err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir(from)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		raw, err := os.ReadFile(filepath.Join(from, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(to, e.Name()), raw, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return to
}

// folderBytes returns every file of dir with its bytes.
func folderBytes(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		raw, _ := os.ReadFile(filepath.Join(dir, e.Name()))
		out[e.Name()] = string(raw)
	}
	return out
}

// TestTrainExportChecksBeforeTraining: `train --init-hf BASE --export-hf DIR` refuses, before
// it trains (nothing printed, the folders unchanged): a DIR holding a user's model (naming its
// files and --overwrite), BASE itself (by name, through a link or ".."), the --checkpoint
// folder, a dangling link; BASE's tokenizer.json a folder, a named pipe or a link to /dev/zero
// (copied after training); and --plot a dangling link.
func TestTrainExportChecksBeforeTraining(t *testing.T) {
	t.Setenv(ograph.EnvBackend, "")
	t.Setenv(ograph.EnvPlugin, "")
	root := t.TempDir()
	base := copyFolder(t, hfFixture, filepath.Join(root, "base"))
	user := copyFolder(t, filepath.Join("..", "..", "hf", "testdata", "tied_bf16_sharded"), filepath.Join(root, "user"))
	if err := os.Symlink(base, filepath.Join(root, "link")); err != nil {
		t.Skipf("no symbolic links here: %v", err)
	}
	if err := os.Symlink(filepath.Join(root, "nowhere"), filepath.Join(root, "dangling")); err != nil {
		t.Fatal(err)
	}
	withTokenizer := func(name string, make func(path string) error) string {
		dir := copyFolder(t, hfFixture, filepath.Join(root, "base-"+name))
		if err := make(filepath.Join(dir, "tokenizer.json")); err != nil {
			t.Fatal(err)
		}
		return dir
	}
	out := filepath.Join(root, "out")
	train := func(init, export string, more ...string) []string {
		return append([]string{"--init-hf", init, "--steps", "1", "--batch", "1", "--microbatches", "1", "--seq", "8", "--export-hf", export}, more...)
	}
	cases := []struct {
		args []string
		want string
	}{
		{train(base, user), "--export-hf " + user + " holds files onegpu did not export (config.json, generation_config.json, model-00001-of-00003.safetensors"},
		{train(base, user), "give --overwrite to replace them"},
		{train(base, base), "--export-hf " + base + " is the folder of --init-hf " + base},
		{train(base, base, "--overwrite"), "is the folder of --init-hf"},
		{train(base, filepath.Join(root, "link")), "is the folder of --init-hf"},
		{train(base, filepath.Join(root, "user", "..", "base")), "is the folder of --init-hf"},
		{train(base, out, "--checkpoint", out), "--export-hf " + out + " is the --checkpoint folder"},
		{train(base, filepath.Join(root, "dangling")), "dangling is a symbolic link to " + filepath.Join(root, "nowhere") + ", which does not exist"},
		{train(withTokenizer("folder", func(p string) error { return os.Mkdir(p, 0o755) }), out), "tokenizer.json is a folder, not a regular file"},
		{train(base, out, "--plot", filepath.Join(root, "dangling")), "--plot " + filepath.Join(root, "dangling") + ": " + filepath.Join(root, "dangling") + " is a symbolic link to"},
		{[]string{"--overwrite"}, "--overwrite does not apply: it needs --checkpoint DIR or --export-hf DIR"},
	}
	if runtime.GOOS != "windows" {
		cases = append(cases,
			struct {
				args []string
				want string
			}{train(withTokenizer("fifo", testkit.MakeFIFO), out), "tokenizer.json is a named pipe, not a regular file"},
			struct {
				args []string
				want string
			}{train(withTokenizer("zero", func(p string) error { return os.Symlink("/dev/zero", p) }), out), "tokenizer.json is a symbolic link to /dev/zero, which is a device"})
	}
	userBefore, baseBefore := folderBytes(t, user), folderBytes(t, base)
	for _, c := range cases {
		var log bytes.Buffer
		err := runTrain(c.args, &log)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("train %v: %v, want an error containing %q", c.args, err, c.want)
		}
		if log.Len() > 0 {
			t.Errorf("train %v printed %q before refusing", c.args, log.String())
		}
	}
	if !maps.Equal(folderBytes(t, user), userBefore) || !maps.Equal(folderBytes(t, base), baseBefore) {
		t.Errorf("a refused run changed the folders")
	}
	if _, err := os.Stat(out); !os.IsNotExist(err) {
		t.Errorf("a refused run created %s", out)
	}
}
