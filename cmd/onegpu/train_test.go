package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/onegpu/onegpu/platform"
	"github.com/onegpu/onegpu/train"
)

// checkpointFiles lists a checkpoint folder's checkpoint files.
func checkpointFiles(t *testing.T, dir string) []string {
	t.Helper()
	names, err := filepath.Glob(filepath.Join(dir, "checkpoint-*"))
	if err != nil {
		t.Fatal(err)
	}
	return names
}

// TestTrainDivergingKeepsCheckpoints: `train --lr 1e30` on a folder of finite checkpoints exits
// with an error saying which checkpoint is kept, leaves the folder as it was, and --json still
// prints the history, the NaN as a string.
func TestTrainDivergingKeepsCheckpoints(t *testing.T) {
	t.Setenv(platform.EnvBackend, "")
	t.Setenv(platform.EnvPlugin, "")
	dir := filepath.Join(t.TempDir(), "d")
	if err := runTrain([]string{"--model", "mlp", "--steps", "6", "--checkpoint", dir}, &bytes.Buffer{}); err != nil {
		t.Fatal(err)
	}
	before := checkpointFiles(t, dir)
	var out bytes.Buffer
	err := runTrain([]string{"--model", "mlp", "--steps", "10", "--lr", "1e30", "--checkpoint", dir, "--save-every", "1", "--json"}, &out)
	var diverged *train.DivergedError
	if !errors.As(err, &diverged) || diverged.LastSaved != 6 {
		t.Fatalf("got %v, want the run to stop keeping the checkpoint of step 6", err)
	}
	var r struct {
		Error string
		Steps []train.StepMetrics
	}
	if err := json.Unmarshal(out.Bytes(), &r); err != nil {
		t.Fatalf("--json of a diverged run is not JSON: %v\n%s", err, out.String())
	}
	if last := r.Steps[len(r.Steps)-1]; !math.IsNaN(last.Loss) && !math.IsInf(last.Loss, 0) || !strings.Contains(r.Error, "diverged") {
		t.Errorf("history %+v, error %q: want the non-finite last loss and the error", r.Steps, r.Error)
	}
	if after := checkpointFiles(t, dir); !slices.Equal(before, after) {
		t.Errorf("the diverging run changed the checkpoints: %v -> %v", before, after)
	}
	// The folder still resumes from step 6.
	out.Reset()
	if err := runTrain([]string{"--model", "mlp", "--steps", "7", "--checkpoint", dir}, &out); err != nil || !strings.Contains(out.String(), "resuming from step 6") {
		t.Errorf("after the diverged run: %v\n%s", err, out.String())
	}
}

// trainRefuses runs train with args and fails t unless it returns an error containing want
// without printing anything first; it returns the error.
func trainRefuses(t *testing.T, args []string, want string) error {
	t.Helper()
	var out bytes.Buffer
	err := runTrain(args, &out)
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("train %v: error %v, want one containing %q", args, err, want)
		if err == nil {
			err = errors.New("no error")
		}
	}
	if out.Len() > 0 {
		t.Errorf("train %v printed %q before refusing", args, out.String())
	}
	return err
}

// TestTrainChecksBeforeWork: output paths (a folder for the plot, a loop of symbolic links, a
// missing folder), flag values and memory are checked before anything is built, trained or
// allocated, with messages that name the flag and the path.
func TestTrainChecksBeforeWork(t *testing.T) {
	t.Setenv(platform.EnvBackend, "")
	t.Setenv(platform.EnvPlugin, "")
	dir := t.TempDir()
	if err := os.Symlink("loop", filepath.Join(dir, "loop")); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--plot", "/nonexistent/x.png", "--json"}, "--plot /nonexistent/x.png: the folder /nonexistent does not exist"},
		{[]string{"--plot", dir, "--json"}, "--plot " + dir + ": is a folder: name a file, e.g. " + filepath.Join(dir, "plot.png")},
		{[]string{"--plot", filepath.Join(dir, "loop"), "--json"}, "runs into a loop of symbolic links"},
		{[]string{"--checkpoint", filepath.Join(dir, "loop", "ck")}, "--checkpoint " + filepath.Join(dir, "loop", "ck") + ": the folder " + filepath.Join(dir, "loop", "ck") + " runs into a loop of symbolic links"},
		{[]string{"--save-every", "0", "--checkpoint", dir}, "--save-every 0: must be at least 1"},
		{[]string{"--keep", "0", "--checkpoint", dir}, "--keep 0: must be at least 1"},
		{[]string{"--keep", "3"}, "--keep does not apply: it needs --checkpoint DIR"},
		{[]string{"--batch", "100000000"}, "this machine has"},
		{[]string{"--checkpoint", filepath.Join(dir, "file", "sub")}, "goes through a file, not a folder"},
		{[]string{"--budget", "1GiB"}, "the budget bounds a streamed step; use --offload params"},
		{[]string{"--offload", "params", "--budget", "0"}, "--budget 0: \"0\" is not a size"},
		{[]string{"--offload", "params", "--model", "mlp"}, "does not run as stages"},
	} {
		if c.args[0] == "--checkpoint" {
			if err := os.WriteFile(filepath.Join(dir, "file"), nil, 0o666); err != nil {
				t.Fatal(err)
			}
		}
		err := trainRefuses(t, c.args, c.want)
		if c.args[0] == "--batch" && !strings.Contains(err.Error(), "flags that fit: --batch ") {
			t.Errorf("%v: %v, want the flags that fit", c.args, err)
		}
	}
}

// TestSetupChecksUnrolledFirst: micro-batches that would unroll a step too large to build in
// reasonable time (65536 of them hung building the MLP's step, before the memory check) are
// refused when the flags are read, for every command that builds a step.
func TestSetupChecksUnrolledFirst(t *testing.T) {
	for _, args := range [][]string{
		{"--model", "mlp", "--batch", "65536", "--microbatches", "65536"},
		{"--preset", "tiny", "--batch", "1024", "--microbatches", "1024", "--remat", "none"},
		{"--preset", "tutorial", "--microbatches", "32"},
	} {
		s, err := parseSetup("train", args)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.config(); err == nil || !strings.Contains(err.Error(), "--microbatches: ") || !strings.Contains(err.Error(), "use at most") {
			t.Errorf("%v: %v, want the micro-batches refused with the most that work", args, err)
		}
	}
}

// TestTrainGuardsTheCheckpointFolder: weights without their .json are refused naming --overwrite,
// which trains next to them and keeps them; a resume on other --data is refused naming
// --allow-other-data, which continues on it; a checkpoint past --steps says so.
func TestTrainGuardsTheCheckpointFolder(t *testing.T) {
	t.Setenv(platform.EnvBackend, "")
	t.Setenv(platform.EnvPlugin, "")
	dir := filepath.Join(t.TempDir(), "mlp")
	if err := runTrain([]string{"--model", "mlp", "--steps", "2", "--checkpoint", dir}, &bytes.Buffer{}); err != nil {
		t.Fatal(err)
	}
	jsons, _ := filepath.Glob(filepath.Join(dir, "checkpoint-*.json"))
	for _, j := range jsons {
		if err := os.Remove(j); err != nil {
			t.Fatal(err)
		}
	}
	before := checkpointFiles(t, dir)
	err := runTrain([]string{"--model", "mlp", "--steps", "3", "--checkpoint", dir}, &bytes.Buffer{})
	if err == nil || !strings.Contains(err.Error(), "pass --overwrite") {
		t.Errorf("train on weights without their .json: %v, want a refusal naming --overwrite", err)
	}
	if err := runTrain([]string{"--model", "mlp", "--steps", "3", "--checkpoint", dir, "--overwrite", "--keep", "1"}, &bytes.Buffer{}); err != nil {
		t.Fatalf("with --overwrite: %v", err)
	}
	after := checkpointFiles(t, dir)
	for _, f := range before {
		if !slices.Contains(after, f) {
			t.Errorf("--overwrite deleted %s, which the run did not write", f)
		}
	}
	var out bytes.Buffer
	if err := runTrain([]string{"--model", "mlp", "--steps", "2", "--checkpoint", dir, "--overwrite"}, &out); err == nil ||
		!strings.Contains(err.Error(), "taken 3 steps, past the 2 asked for") {
		t.Errorf("--steps 2 on a checkpoint of step 3: %v", err)
	}

	gpt := filepath.Join(t.TempDir(), "gpt")
	tiny := []string{"--preset", "tiny", "--batch", "2", "--microbatches", "1", "--checkpoint", gpt}
	if err := runTrain(append([]string{"--steps", "1", "--data", "text"}, tiny...), &bytes.Buffer{}); err != nil {
		t.Fatal(err)
	}
	err = runTrain(append([]string{"--steps", "2", "--data", "synthetic"}, tiny...), &bytes.Buffer{})
	if err == nil || !strings.Contains(err.Error(), "trained on byte-level text of 366") || !strings.Contains(err.Error(), "this run's data is synthetic tokens") ||
		!strings.Contains(err.Error(), "--allow-other-data") {
		t.Errorf("resuming on --data synthetic: %v, want a refusal naming both data and --allow-other-data", err)
	}
	out.Reset()
	if err := runTrain(append([]string{"--steps", "2", "--data", "synthetic", "--allow-other-data"}, tiny...), &out); err != nil ||
		!strings.Contains(out.String(), "resuming from step 1") {
		t.Errorf("with --allow-other-data: %v\n%s", err, out.String())
	}
	out.Reset()
	if err := runTrain(append([]string{"--steps", "2", "--data", "synthetic"}, tiny...), &out); err != nil || !strings.Contains(out.String(), "nothing to train") {
		t.Errorf("--steps 2 on a checkpoint of step 2: %v\n%s", err, out.String())
	}
}

// TestTrainStreamed: `train --offload params` streams the tiny GPT through the device and reports
// the traffic, the time of each part, the bound and the largest device footprint (--json: the
// history's offload object).
func TestTrainStreamed(t *testing.T) {
	t.Setenv(platform.EnvBackend, "")
	t.Setenv(platform.EnvPlugin, "")
	var out bytes.Buffer
	if err := runTrain([]string{"--offload", "params", "--steps", "2", "--batch", "4", "--microbatches", "2", "--budget", "64MiB", "--json"}, &out); err != nil {
		t.Fatal(err)
	}
	var h train.History
	if err := json.Unmarshal(out.Bytes(), &h); err != nil {
		t.Fatalf("%v in %s", err, out.String())
	}
	if o, streamed := h.Offload.(*train.StreamStats); !streamed || h.Mode != "params" || o.BytesToDevice <= 0 || o.BytesToHost <= 0 || o.DevicePeakBytes <= 0 || o.DevicePeakBytes > 64<<20 {
		t.Errorf("offload %+v: want a streamed step's traffic and a footprint within 64 MiB", o)
	}
	out.Reset()
	if err := runTrain([]string{"--offload", "params", "--steps", "2", "--batch", "4", "--microbatches", "2"}, &out); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"streamed (params)", "bound by", "largest device use"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("the summary lacks %q:\n%s", want, out.String())
		}
	}
}
