package hf_test

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/gomlx/gomlx/pkg/core/dtypes"

	"github.com/onegpu/onegpu/hf"
	"github.com/onegpu/onegpu/internal/filelock"
	"github.com/onegpu/onegpu/internal/regularfile"
	"github.com/onegpu/onegpu/internal/testkit"
)

// TestExportRefusesSomeoneElsesModel: a folder holding a user's model (config.json,
// model.safetensors, two shards and their index, which an export would replace or delete) is
// refused with a *ForeignFolderError naming the files, and left byte for byte as it was; with
// Overwrite the export replaces them and marks the folder, so that a later export needs no
// Overwrite.
func TestExportRefusesSomeoneElsesModel(t *testing.T) {
	ctx := load(t, untiedDir, dtypes.Float32)
	user := filepath.Join(t.TempDir(), "user")
	copyDir(t, tiedDir, user)
	if err := os.WriteFile(filepath.Join(user, "model.safetensors"), []byte("the user's own weights"), 0o644); err != nil {
		t.Fatal(err)
	}
	before := snapshot(t, user)
	err := hf.Export(ctx, user, llama(untiedConfig), hf.ExportOptions{})
	var foreign *hf.ForeignFolderError
	if !errors.As(err, &foreign) || !strings.Contains(err.Error(), "config.json, generation_config.json, model-00001-of-00003.safetensors") ||
		!strings.Contains(err.Error(), "nothing was written") || !strings.Contains(err.Error(), "ExportOptions.Overwrite") {
		t.Fatalf("exporting into a folder holding a model: %v", err)
	}
	if after := snapshot(t, user); !reflect.DeepEqual(after, before) {
		t.Fatalf("the refused export changed the folder: %v", files(t, user))
	}
	if err := hf.CheckExportFolder(user, hf.ExportOptions{}); !errors.As(err, &foreign) {
		t.Errorf("CheckExportFolder: %v, want the same refusal", err)
	}
	if err := hf.Export(ctx, user, llama(untiedConfig), hf.ExportOptions{Overwrite: true}); err != nil {
		t.Fatal(err)
	}
	if got, want := files(t, user), []string{"config.json", "generation_config.json", "model.safetensors", hf.MarkerFile}; !reflect.DeepEqual(got, want) {
		t.Errorf("after the export with Overwrite: %v, want %v", got, want)
	}
	if want, got := readCheckpoint(t, untiedDir), readCheckpoint(t, user); !reflect.DeepEqual(got, want) {
		t.Errorf("the export with Overwrite did not write the model")
	}
	if err := hf.Export(ctx, user, llama(untiedConfig), hf.ExportOptions{DType: dtypes.BFloat16}); err != nil {
		t.Errorf("exporting again into the marked folder: %v", err)
	}
	marker, _ := os.ReadFile(filepath.Join(user, hf.MarkerFile))
	if !strings.Contains(string(marker), `"complete": true`) || !strings.Contains(string(marker), `"model.safetensors"`) {
		t.Errorf("marker %s", marker)
	}
}

// TestExportRefusesItsSource: an export into the folder the model was loaded from
// (ExportOptions.From) is a *SourceFolderError, named directly, through a symbolic link or
// through "..", even with Overwrite; the folder keeps its bytes.
func TestExportRefusesItsSource(t *testing.T) {
	root := t.TempDir()
	source := filepath.Join(root, "source")
	copyDir(t, untiedDir, source)
	ctx := load(t, source, dtypes.Float32)
	before := snapshot(t, source)
	link := filepath.Join(root, "link")
	if err := os.Symlink(source, link); err != nil {
		t.Skipf("no symbolic links here: %v", err)
	}
	if err := os.Mkdir(filepath.Join(root, "other"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, dir := range []string{source, link, filepath.Join(root, "other", "..", "source")} {
		for _, overwrite := range []bool{false, true} {
			err := hf.Export(ctx, dir, llama(untiedConfig), hf.ExportOptions{From: source, Overwrite: overwrite})
			var same *hf.SourceFolderError
			if !errors.As(err, &same) || !strings.Contains(err.Error(), "the folder the run read its model or adapter from") {
				t.Errorf("export into %s (Overwrite %v): %v, want a *SourceFolderError", dir, overwrite, err)
			}
		}
	}
	if after := snapshot(t, source); !reflect.DeepEqual(after, before) {
		t.Errorf("the refused exports changed the source: %v", files(t, source))
	}
}

// TestExportRemovesLeftovers: the temporary files an export killed mid-write leaves
// (".model.safetensors.NNN.tmp", ".config.json.NNN.tmp") are removed by the next export into the
// folder; a hidden file of another name is kept.
func TestExportRemovesLeftovers(t *testing.T) {
	ctx := load(t, untiedDir, dtypes.Float32)
	out := filepath.Join(t.TempDir(), "out")
	if err := hf.Export(ctx, out, llama(untiedConfig), hf.ExportOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{".model.safetensors.123456.tmp", ".config.json.98.tmp", ".model-00001-of-00002.safetensors.5.tmp", ".notes.7.tmp"} {
		if err := os.WriteFile(filepath.Join(out, name), []byte("half"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := hf.Export(ctx, out, llama(untiedConfig), hf.ExportOptions{}); err != nil {
		t.Fatal(err)
	}
	if got, want := files(t, out), []string{".notes.7.tmp", "config.json", "model.safetensors", hf.MarkerFile}; !reflect.DeepEqual(got, want) {
		t.Errorf("after the second export: %v, want %v", got, want)
	}
}

// TestExportChecksBeforeWriting: a dangling symbolic link or a file where the folder goes, a
// folder where the export writes a file, an export holding the folder's lock, and files to copy
// from the source that are not regular files (a folder, a named pipe, a link to a device) are
// refused, naming the path, before anything is written.
func TestExportChecksBeforeWriting(t *testing.T) {
	ctx := load(t, untiedDir, dtypes.Float32)
	root := t.TempDir()
	dangling := filepath.Join(root, "dangling")
	if err := os.Symlink(filepath.Join(root, "nowhere"), dangling); err != nil {
		t.Skipf("no symbolic links here: %v", err)
	}
	file := filepath.Join(root, "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	ours := filepath.Join(root, "ours")
	if err := hf.Export(ctx, ours, llama(untiedConfig), hf.ExportOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(ours, "config.json")); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(ours, "config.json"), 0o755); err != nil {
		t.Fatal(err)
	}
	source := func(name string, make func(path string) error) string {
		dir := filepath.Join(root, "source-"+strings.ReplaceAll(name, "/", "-"))
		copyDir(t, untiedDir, dir)
		_ = os.Remove(filepath.Join(dir, "tokenizer.json")) // the fixture's own, replaced
		if err := make(filepath.Join(dir, "tokenizer.json")); err != nil {
			t.Fatal(err)
		}
		return dir
	}
	cases := []struct {
		dir  string
		from string
		want string
	}{
		{dangling, "", dangling + " is a symbolic link to " + filepath.Join(root, "nowhere") + ", which does not exist"},
		{file, "", file + " is a regular file, not a folder"},
		{ours, "", filepath.Join(ours, "config.json") + " is a folder where the export writes a file"},
		{filepath.Join(root, "new"), source("folder", func(p string) error { return os.Mkdir(p, 0o755) }), "tokenizer.json is a folder, not a regular file"},
	}
	if runtime.GOOS != "windows" {
		cases = append(cases,
			struct{ dir, from, want string }{filepath.Join(root, "new"), source("fifo", testkit.MakeFIFO), "tokenizer.json is a named pipe, not a regular file"},
			struct{ dir, from, want string }{filepath.Join(root, "new"), source("/dev/zero", func(p string) error { return os.Symlink("/dev/zero", p) }),
				"tokenizer.json is a symbolic link to /dev/zero, which is a device, not a regular file"})
	}
	for _, c := range cases {
		opts := hf.ExportOptions{From: c.from}
		for name, err := range map[string]error{"CheckExportFolder": hf.CheckExportFolder(c.dir, opts), "Export": hf.Export(ctx, c.dir, llama(untiedConfig), opts)} {
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("%s(%s, From %q): %v, want %q", name, c.dir, c.from, err, c.want)
			}
		}
	}
	if _, err := os.Stat(filepath.Join(root, "new")); !os.IsNotExist(err) {
		t.Errorf("a refused export created its folder")
	}
	if !filelock.Supported {
		return
	}
	os.Remove(filepath.Join(ours, "config.json"))
	held, err := regularfile.Open(filepath.Join(ours, hf.MarkerFile), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	if err := filelock.TryLock(held); err != nil {
		t.Fatal(err)
	}
	before := files(t, ours)
	if err := hf.Export(ctx, ours, llama(untiedConfig), hf.ExportOptions{}); err == nil || !strings.Contains(err.Error(), "another export is writing to "+ours) {
		t.Errorf("an export while another holds the folder: %v", err)
	}
	if after := files(t, ours); !slices.Equal(after, before) {
		t.Errorf("files %v, then %v", before, after)
	}
}
