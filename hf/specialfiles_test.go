package hf_test

import (
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/ml/context"

	"github.com/onegpu/onegpu/hf"
	"github.com/onegpu/onegpu/internal/testkit"
)

// snapshot returns every file of dir with its bytes.
func snapshot(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, name := range files(t, dir) {
		raw, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		out[name] = string(raw)
	}
	return out
}

// copyDir copies the files of the folder from into a new folder to.
func copyDir(t *testing.T, from, to string) {
	t.Helper()
	if err := os.MkdirAll(to, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, raw := range snapshot(t, from) {
		if err := os.WriteFile(filepath.Join(to, name), []byte(raw), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// TestLoadRefusesSpecialFiles: every file of a checkpoint folder is read as a bounded regular
// file, so that config.json, the index, model.safetensors or a shard being a link to /dev/zero or
// /dev/urandom, a named pipe, a folder or a sparse 1 TiB file is an error naming the file and
// what it is, at once (each load must end within 10 s: before, they hung or died of Go's "out of
// memory"); a config.json key that is not UTF-8 is refused, not read with the bad byte replaced;
// and a folder of Hugging Face cache links (snapshot -> blobs) loads.
func TestLoadRefusesSpecialFiles(t *testing.T) {
	fifo := func(path string) error {
		if runtime.GOOS == "windows" {
			return os.Mkdir(path, 0o755) // no named pipes in the file system there: a folder instead
		}
		return testkit.MakeFIFO(path)
	}
	link := func(target string) func(path string) error {
		return func(path string) error { return os.Symlink(target, path) }
	}
	sparse := func(path string) error {
		f, err := os.Create(path)
		if err != nil {
			return err
		}
		defer f.Close()
		return f.Truncate(1 << 40)
	}
	folder := func(path string) error { return os.Mkdir(path, 0o755) }
	notUTF8 := func(path string) error {
		raw, err := os.ReadFile(filepath.Join(untiedDir, "config.json"))
		if err != nil {
			return err
		}
		return os.WriteFile(path, []byte(strings.Replace(string(raw), `"vocab_size"`, "\"vocab_size\xff\"", 1)), 0o644)
	}
	cases := []struct {
		fixture, file string
		make          func(path string) error
		want          string
	}{
		{untiedDir, "config.json", folder, "config.json is a folder, not a regular file"},
		{untiedDir, "config.json", fifo, "config.json is a "},
		{untiedDir, "config.json", sparse, "config.json holds 1099511627776 bytes, more than the 67108864 (64 MiB) expected"},
		{untiedDir, "config.json", notUTF8, "config.json is not valid UTF-8 (byte "},
		{untiedDir, "model.safetensors", folder, "model.safetensors is a folder, not a regular file"},
		{untiedDir, "model.safetensors", fifo, "model.safetensors is a "},
		{tiedDir, "model.safetensors.index.json", fifo, "model.safetensors.index.json is a "},
		{tiedDir, "model.safetensors.index.json", sparse, "more than the 67108864 (64 MiB) expected"},
		{tiedDir, "model-00002-of-00003.safetensors", fifo, "model-00002-of-00003.safetensors is a "},
	}
	if runtime.GOOS != "windows" {
		cases = append(cases, []struct {
			fixture, file string
			make          func(path string) error
			want          string
		}{
			{untiedDir, "config.json", link("/dev/zero"), "config.json is a symbolic link to /dev/zero, which is a device, not a regular file"},
			{untiedDir, "model.safetensors", link("/dev/zero"), "model.safetensors is a symbolic link to /dev/zero, which is a device"},
			{tiedDir, "model.safetensors.index.json", link("/dev/urandom"), "index.json is a symbolic link to /dev/urandom, which is a device"},
			{tiedDir, "model-00001-of-00003.safetensors", link("/dev/zero"), "is a symbolic link to /dev/zero, which is a device"},
		}...)
	}
	for _, c := range cases {
		dir := filepath.Join(t.TempDir(), "m")
		copyDir(t, c.fixture, dir)
		path := filepath.Join(dir, c.file)
		if err := os.Remove(path); err != nil {
			t.Fatal(err)
		}
		if err := c.make(path); err != nil {
			t.Skipf("cannot make %s here: %v", c.file, err)
		}
		done := make(chan error, 1)
		go func() {
			_, err := hf.Open(context.New(), dir, dtypes.Float32, 0)
			done <- err
		}()
		select {
		case err := <-done:
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("%s replaced: %v, want an error containing %q", c.file, err, c.want)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("loading with %s replaced has not ended in 10 s", c.file)
		}
	}

	// A Hugging Face cache: snapshots/REV/NAME -> ../../blobs/HASH.
	cache := t.TempDir()
	snapshot := filepath.Join(cache, "snapshots", "rev")
	for _, d := range []string{snapshot, filepath.Join(cache, "blobs")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, name := range files(t, untiedDir) {
		raw, _ := os.ReadFile(filepath.Join(untiedDir, name))
		if err := os.WriteFile(filepath.Join(cache, "blobs", "h-"+name), raw, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(filepath.Join("..", "..", "blobs", "h-"+name), filepath.Join(snapshot, name)); err != nil {
			t.Skipf("no symbolic links here: %v", err)
		}
	}
	if _, err := hf.Open(context.New(), snapshot, dtypes.Float32, 0); err != nil {
		t.Errorf("loading a cache snapshot of links: %v", err)
	}
}

// TestLoadRefusesAbsurdLayerCounts: a config.json asking for 10^6 or 10^9 layers of the
// fixture's 2-layer weights is refused by CheckWeights and Open from the files' headers,
// in under 10 s, naming both counts (before, eval --hf died of Go's "out of memory" building the
// list of 9·10^9 tensor names).
func TestLoadRefusesAbsurdLayerCounts(t *testing.T) {
	for _, layers := range []int{1_000_000, 1_000_000_000} {
		dir := filepath.Join(t.TempDir(), "m")
		copyDir(t, untiedDir, dir)
		if err := os.WriteFile(filepath.Join(dir, "config.json"), edit(t, map[string]any{"num_hidden_layers": layers}), 0o644); err != nil {
			t.Fatal(err)
		}
		layout, err := hf.ReadConfig(dir, 0)
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan [2]error, 1)
		go func() {
			_, err := hf.Open(context.New(), dir, dtypes.Float32, 0)
			done <- [2]error{hf.CheckWeights(dir, layout), err}
		}()
		select {
		case errs := <-done:
			for _, err := range errs {
				if err == nil || !strings.Contains(err.Error(), "describes "+strconv.Itoa(layers)+" layers") ||
					!strings.Contains(err.Error(), "hold 2 layers, 21 tensors of 106816 parameters") {
					t.Errorf("%d layers: %v", layers, err)
				}
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%d layers: no answer in 10 s", layers)
		}
	}
}
