package train_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/onegpu/onegpu/data"
	"github.com/onegpu/onegpu/internal/testkit"
	"github.com/onegpu/onegpu/train"
	"github.com/onegpu/onegpu/train/checkpoint"
)

// The checkpoint folder is the user's data: no file in it, and no file it links to, is read,
// truncated or deleted unless onegpu wrote it (issue 28). Each test fails on the main of 2026-12-04.

// TestLockFileIsNeverWrittenThrough: a lock file that is a symbolic link, a hard link of another
// file, or a file holding what a lock file does not hold is refused, naming it, and the file it
// is or points to keeps its content (main followed the link and emptied the target).
func TestLockFileIsNeverWrittenThrough(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("symbolic and hard links need privileges on Windows")
	}
	c := smallMLP(t)
	const precious = "someone's notes, not a lock\n"
	for _, tc := range []struct {
		name string
		make func(lock, victim string) error
		want string
	}{
		{"symbolic link", func(lock, victim string) error { return os.Symlink(victim, lock) }, "is a symbolic link to "},
		{"hard link", func(lock, victim string) error { return os.Link(victim, lock) }, "has 2 names"},
		{"someone's file", func(lock, _ string) error { return os.WriteFile(lock, []byte(precious), 0o666) }, "not a holder's line"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "ck")
			if err := os.Mkdir(dir, 0o777); err != nil {
				t.Fatal(err)
			}
			victim := filepath.Join(t.TempDir(), "victim.txt")
			if err := os.WriteFile(victim, []byte(precious), 0o666); err != nil {
				t.Fatal(err)
			}
			lock := filepath.Join(dir, "onegpu.lock")
			if err := tc.make(lock, victim); err != nil {
				t.Fatal(err)
			}
			ck, err := train.OpenCheckpoints(dir, c, 2)
			if err == nil {
				ck.Close()
			}
			if err == nil || !strings.Contains(err.Error(), lock) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("opening the folder: %v; want a refusal naming %s and saying %q", err, lock, tc.want)
			}
			for _, path := range []string{victim, lock} {
				if b, err := os.ReadFile(path); err != nil || string(b) != precious {
					t.Errorf("%s now holds %q (%v), want it unchanged", path, b, err)
				}
			}
		})
	}
	// A lock file a killed run left (its holder's line) is taken over as before.
	dir := filepath.Join(t.TempDir(), "ck")
	if err := os.Mkdir(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "onegpu.lock"), []byte("pid 999999999, onegpu train, since 2026-01-01 00:00:00\n"), 0o666); err != nil {
		t.Fatal(err)
	}
	ck, err := train.OpenCheckpoints(dir, c, 2)
	if err != nil {
		t.Fatalf("a lock file left by a dead run: %v", err)
	}
	ck.Close()
}

// TestWeightsNoCheckpointAccountsForAreRefused: weights whose .json was removed (`rm ck/*.json`:
// main started from step 0 and pruned them), and a GoMLX checkpoint without onegpu's manifest
// next to a whole one (main pruned it), make a run refuse the folder, naming each file and
// --overwrite, and leave it as it was.
func TestWeightsNoCheckpointAccountsForAreRefused(t *testing.T) {
	c := smallMLP(t)
	t.Run("json removed", func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "ck")
		if _, err := runIn(t, c, dir, 3, train.RunOptions{SaveEvery: 1, Keep: 3}); err != nil {
			t.Fatal(err)
		}
		jsons, _ := filepath.Glob(filepath.Join(dir, "checkpoint-*.json"))
		for _, j := range jsons {
			if err := os.Remove(j); err != nil {
				t.Fatal(err)
			}
		}
		before := files(t, dir)
		h, err := runIn(t, c, dir, 5, train.RunOptions{SaveEvery: 1, Keep: 1})
		if err == nil || !strings.Contains(err.Error(), "RunOptions.Overwrite") || !strings.Contains(err.Error(), "step-00000001.bin: its manifest is onegpu's but its .json is gone") {
			t.Errorf("a run on weights without their .json: %v (history %v); want a refusal naming the files and RunOptions.Overwrite", err, h)
		}
		if after := files(t, dir); !maps.Equal(before, after) {
			t.Errorf("the refused run changed the folder: %v -> %v", keys(before), keys(after))
		}
	})
	t.Run("a checkpoint without manifest", func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "ck")
		if _, err := runIn(t, c, dir, 2, train.RunOptions{SaveEvery: 1, Keep: 2}); err != nil {
			t.Fatal(err)
		}
		oldest := committed(t, dir)[0]
		if err := os.Remove(oldest + ".onegpu"); err != nil { // now GoMLX's checkpoint, not onegpu's
			t.Fatal(err)
		}
		before := files(t, dir)
		_, err := runIn(t, c, dir, 6, train.RunOptions{SaveEvery: 1, Keep: 1})
		if err == nil || !strings.Contains(err.Error(), filepath.Base(oldest)+".bin: no manifest") {
			t.Errorf("a run next to a checkpoint without manifest: %v; want a refusal naming its .bin", err)
		}
		if after := files(t, dir); !maps.Equal(before, after) {
			t.Errorf("the refused run changed the folder: %v -> %v", keys(before), keys(after))
		}
	})
}

// TestOverwriteNeverDeletesWhatOnegpuDidNotWrite: with Overwrite the run trains in the folder
// (from step 0 when nothing in it is whole) and prunes its own checkpoints only: the files no
// whole checkpoint accounted for stay, byte for byte.
func TestOverwriteNeverDeletesWhatOnegpuDidNotWrite(t *testing.T) {
	c := smallMLP(t)
	dir := filepath.Join(t.TempDir(), "ck")
	if _, err := runIn(t, c, dir, 2, train.RunOptions{SaveEvery: 1, Keep: 2}); err != nil {
		t.Fatal(err)
	}
	bases := committed(t, dir)
	if err := os.Remove(bases[1] + ".json"); err != nil { // weights with a manifest, no .json
		t.Fatal(err)
	}
	if err := os.Remove(bases[0] + ".onegpu"); err != nil { // GoMLX's checkpoint, no manifest
		t.Fatal(err)
	}
	theirs := files(t, dir)
	var progress strings.Builder
	h, err := runIn(t, c, dir, 4, train.RunOptions{SaveEvery: 1, Keep: 1, Overwrite: true, Progress: &progress})
	if err != nil || h.Resumed != 0 {
		t.Fatalf("with Overwrite: %v, resumed at %v; want a run from step 0", err, h)
	}
	if !strings.Contains(progress.String(), "writing next to weights no whole checkpoint accounts for") {
		t.Errorf("the run did not say it writes next to someone's weights:\n%s", progress.String())
	}
	after := files(t, dir)
	for name, content := range theirs {
		if after[name] != content {
			t.Errorf("%s was deleted or changed by a run that did not write it", name)
		}
	}
	if ours := committed(t, dir); len(ours) != 2 || !strings.HasSuffix(ours[1], "step-00000004") {
		t.Errorf("checkpoints after the run: %v; want GoMLX's and the run's step-4 one (keep 1)", ours)
	}
}

// editManifest rewrites the newest checkpoint's manifest of dir with edit applied to its keys.
func editManifest(t *testing.T, dir string, edit func(m map[string]any)) string {
	t.Helper()
	path := committed(t, dir)[len(committed(t, dir))-1] + ".onegpu"
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatal(err)
	}
	edit(m)
	if raw, err = json.Marshal(m); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, raw, 0o666); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestManifestStepIsCheckedAgainstTheWeights: a manifest whose step was edited to 100000 is
// refused, naming both steps, before anything trains (main resumed from the weights' step and
// printed nothing).
func TestManifestStepIsCheckedAgainstTheWeights(t *testing.T) {
	c := smallMLP(t)
	dir := filepath.Join(t.TempDir(), "ck")
	if _, err := runIn(t, c, dir, 3, train.RunOptions{}); err != nil {
		t.Fatal(err)
	}
	editManifest(t, dir, func(m map[string]any) { m["step"] = 100000 })
	before := files(t, dir)
	h, err := runIn(t, c, dir, 6, train.RunOptions{})
	if err == nil || !strings.Contains(err.Error(), "its manifest says step 100000, its weights hold step 3") {
		t.Errorf("resuming an edited manifest: %v (history %+v); want a refusal naming both steps", err, h)
	}
	if after := files(t, dir); !maps.Equal(before, after) {
		t.Errorf("the refused run changed the folder: %v -> %v", keys(before), keys(after))
	}
}

// TestStepsBelowTheCheckpointAreRefused: asking for fewer steps than the checkpoint has taken is
// an error saying so (main trained nothing and returned no error); asking for exactly as many
// says there is nothing to train.
func TestStepsBelowTheCheckpointAreRefused(t *testing.T) {
	c := smallMLP(t)
	dir := filepath.Join(t.TempDir(), "ck")
	if _, err := runIn(t, c, dir, 4, train.RunOptions{}); err != nil {
		t.Fatal(err)
	}
	_, err := runIn(t, c, dir, 2, train.RunOptions{})
	if err == nil || !strings.Contains(err.Error(), "taken 4 steps, past the 2 asked for") || !strings.Contains(err.Error(), "nothing to train") {
		t.Errorf("2 steps on a checkpoint of step 4: %v; want an error saying nothing is trained", err)
	}
	var progress strings.Builder
	h, err := runIn(t, c, dir, 4, train.RunOptions{Progress: &progress})
	if err != nil || len(h.Steps) != 0 || !strings.Contains(progress.String(), "at step 4, the steps asked for: nothing to train") {
		t.Errorf("4 steps on a checkpoint of step 4: %v, %d steps, progress:\n%s\nwant nothing trained, and said", err, len(h.Steps), progress.String())
	}
}

// TestCheckpointFilesMustBeRegular: the newest checkpoint's data replaced by a link to /dev/zero
// (main read it until memory ran out) or by a named pipe (main hung) is skipped, naming what it
// is, and the run resumes from the previous checkpoint; the link's target is never read.
func TestCheckpointFilesMustBeRegular(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("no /dev/zero nor named pipes")
	}
	c := smallMLP(t)
	for _, tc := range []struct {
		name string
		make func(path string) error
		want string
	}{
		{"link to /dev/zero", func(path string) error { return os.Symlink("/dev/zero", path) }, "is a symbolic link to /dev/zero"},
		{"named pipe", testkit.MakeFIFO, "is a named pipe"},
		{"larger file", func(path string) error { return os.WriteFile(path, make([]byte, 1<<20), 0o666) }, "holds 1048576 bytes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "ck")
			if _, err := runIn(t, c, dir, 2, train.RunOptions{SaveEvery: 1}); err != nil {
				t.Fatal(err)
			}
			bin := committed(t, dir)[1] + ".bin"
			if err := os.Remove(bin); err != nil {
				t.Fatal(err)
			}
			if err := tc.make(bin); err != nil {
				t.Fatal(err)
			}
			var progress strings.Builder
			h, err := runIn(t, c, dir, 3, train.RunOptions{Progress: &progress})
			if err != nil || h.Resumed != 1 || !strings.Contains(progress.String(), tc.want) {
				t.Errorf("resumed at %v (%v), want step 1 with the step-2 checkpoint skipped saying %q; progress:\n%s", h, err, tc.want, progress.String())
			}
		})
	}
}

// TestCheckpointLayoutIsCheckedBeforeReading: a .bin grown to 4 MiB, its manifest's bin_bytes
// edited to match, is skipped because the variables' shapes in its .json add up to less, before
// a byte of it is read (its checksum could say so only after reading it all: a file of any size);
// the run resumes from the checkpoint before.
func TestCheckpointLayoutIsCheckedBeforeReading(t *testing.T) {
	c := smallMLP(t)
	dir := filepath.Join(t.TempDir(), "ck")
	if _, err := runIn(t, c, dir, 2, train.RunOptions{SaveEvery: 1}); err != nil {
		t.Fatal(err)
	}
	const size = 4 << 20
	if err := os.Truncate(committed(t, dir)[1]+".bin", size); err != nil {
		t.Fatal(err)
	}
	var shapes float64
	editManifest(t, dir, func(m map[string]any) { shapes, m["bin_bytes"] = m["bin_bytes"].(float64), size })
	var progress strings.Builder
	h, err := runIn(t, c, dir, 3, train.RunOptions{Progress: &progress})
	want := fmt.Sprintf("the manifest records %d bytes of data, the variables' shapes %d", size, int64(shapes))
	if err != nil || h.Resumed != 1 || !strings.Contains(progress.String(), want) {
		t.Errorf("resumed at %v (%v), want step 1 with the step-2 checkpoint skipped saying %q; progress:\n%s", h, err, want, progress.String())
	}
}

// otherData is the MLP's data drawn from another seed: same shapes, other values.
func otherData(c train.Config) data.Data {
	c.Seed++
	return mlpData(c)
}

// TestResumeOnOtherDataIsRefused: a checkpoint records its data; a resume with other data is
// refused naming both and the way to allow it (main resumed silently).
func TestResumeOnOtherDataIsRefused(t *testing.T) {
	c := smallMLP(t)
	dir := filepath.Join(t.TempDir(), "ck")
	if _, err := runIn(t, c, dir, 2, train.RunOptions{}); err != nil {
		t.Fatal(err)
	}
	before := files(t, dir)
	tr, err := train.New(embedded(), c)
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	_, err = tr.Run(otherData(c), train.RunOptions{Steps: 4, CheckpointDir: dir})
	var mismatch *checkpoint.DataMismatchError
	if !errors.As(err, &mismatch) || !strings.Contains(err.Error(), "seed 1") || !strings.Contains(err.Error(), "seed 2") ||
		!strings.Contains(err.Error(), "RunOptions.AllowOtherData") {
		t.Fatalf("resuming on other data: %v; want a *DataMismatchError naming both data and RunOptions.AllowOtherData", err)
	}
	if after := files(t, dir); !maps.Equal(before, after) {
		t.Errorf("the refused run changed the folder: %v -> %v", keys(before), keys(after))
	}
	if _, err := tr.Run(otherData(c), train.RunOptions{Steps: 4, CheckpointDir: dir, AllowOtherData: true}); err != nil {
		t.Fatalf("with AllowOtherData: %v", err)
	}
	// The checkpoints now record the new data: the run continues on it without being asked.
	if _, err := runIn(t, c, dir, 5, train.RunOptions{}); !errors.As(err, &mismatch) {
		t.Errorf("back to the first data after the switch: %v, want a *DataMismatchError", err)
	}
}

// TestDamagedManifestKeyIsNamed: a manifest with a damaged or missing key is reported with its
// path and the key (main said "manifest ... is damaged"), and nothing in the folder changes.
func TestDamagedManifestKeyIsNamed(t *testing.T) {
	c := smallMLP(t)
	for _, tc := range []struct {
		name string
		edit func(m map[string]any)
		want string
	}{
		{"step a string", func(m map[string]any) { m["step"] = "three" }, `key "step" holds a JSON string where an integer belongs`},
		{"checksum missing", func(m map[string]any) { delete(m, "bin_sha256") }, `key "bin_sha256" is missing`},
		{"batch an array", func(m map[string]any) { m["written_by"].(map[string]any)["batch"] = []int{1} }, `key "written_by.batch" holds a JSON array`},
		{"checksum short", func(m map[string]any) { m["json_sha256"] = "abc" }, `key "json_sha256" is "abc": a SHA-256 is 64 hexadecimal digits`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "ck")
			if _, err := runIn(t, c, dir, 2, train.RunOptions{SaveEvery: 1}); err != nil {
				t.Fatal(err)
			}
			path := editManifest(t, dir, tc.edit)
			before := files(t, dir)
			_, err := runIn(t, c, dir, 3, train.RunOptions{})
			if err == nil || !strings.Contains(err.Error(), "manifest "+path+": "+tc.want) {
				t.Errorf("got %v\nwant an error naming %s and saying %q", err, path, tc.want)
			}
			if after := files(t, dir); !maps.Equal(before, after) {
				t.Errorf("the refused run changed the folder: %v -> %v", keys(before), keys(after))
			}
		})
	}
}
