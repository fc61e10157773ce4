package train_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/gomlx/gomlx/pkg/ml/context"
	"github.com/gomlx/gomlx/pkg/ml/context/checkpoints"

	"github.com/onegpu/onegpu/data"
	"github.com/onegpu/onegpu/mixed"
	"github.com/onegpu/onegpu/models"
	"github.com/onegpu/onegpu/optim"
	"github.com/onegpu/onegpu/train"
	"github.com/onegpu/onegpu/train/checkpoint"
)

// smallMLP is a float32 classifier small enough that a step takes milliseconds: the checkpoint
// tests train it many times.
func smallMLP(t testing.TB) train.Config {
	k := models.ClassifierConfig{Inputs: 16, Hidden: 32, Classes: 10, Dropout: 0.1}
	return train.Config{Model: models.Classifier{Config: k}, Batch: 32, MicroBatches: 1, Policy: mixed.Float32,
		Schedule: optim.Constant(1e-3), Seed: 1}
}

func mlpData(c train.Config) data.Data {
	k := c.Model.(models.Classifier).Config
	d, err := data.NewClassifierBatch(c.Batch, k.Inputs, k.Classes, c.Seed)
	if err != nil {
		panic(err)
	}
	return d
}

// runIn trains c up to steps in dir and returns the history and error.
func runIn(t testing.TB, c train.Config, dir string, steps int, opts train.RunOptions) (*train.History, error) {
	t.Helper()
	tr, err := train.New(embedded(), c)
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	opts.Steps, opts.CheckpointDir = steps, dir
	return tr.Run(mlpData(c), opts)
}

// files lists a folder's names with their contents (but the lock's), to show nothing changed.
func files(t testing.TB, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.Name() == "onegpu.lock" {
			continue // says who held the folder last
		}
		if e.IsDir() {
			out[e.Name()+"/"] = ""
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		out[e.Name()] = string(b)
	}
	return out
}

// newest returns the base paths of the committed checkpoints, oldest first.
func committed(t testing.TB, dir string) []string {
	t.Helper()
	matches, err := filepath.Glob(filepath.Join(dir, "checkpoint-*.json"))
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(matches)
	for i, m := range matches {
		matches[i] = strings.TrimSuffix(m, ".json")
	}
	return matches
}

// weights loads the newest checkpoint of dir with GoMLX's own handler (so the folder stays readable
// by GoMLX's tools) and returns every variable's bytes.
func weights(t testing.TB, dir string) map[string][]byte {
	t.Helper()
	ctx := context.New()
	if _, err := checkpoints.Load(ctx).Dir(dir).Immediate().Done(); err != nil {
		t.Fatal(err)
	}
	out := map[string][]byte{}
	ctx.EnumerateVariables(func(v *context.Variable) {
		if err := v.MustValue().ConstBytes(func(b []byte) { out[v.ParameterName()] = bytes.Clone(b) }); err != nil {
			t.Fatal(err)
		}
	})
	if len(out) == 0 {
		t.Fatalf("no variables in the checkpoint of %s", dir)
	}
	return out
}

// uninterrupted returns the weights of c after steps in one run.
func uninterrupted(t testing.TB, c train.Config, steps int) map[string][]byte {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "uninterrupted")
	if _, err := runIn(t, c, dir, steps, train.RunOptions{}); err != nil {
		t.Fatal(err)
	}
	return weights(t, dir)
}

func sameWeights(t testing.TB, want, got map[string][]byte) {
	t.Helper()
	if len(want) != len(got) {
		t.Errorf("%d variables, want %d", len(got), len(want))
	}
	for name, w := range want {
		if !bytes.Equal(w, got[name]) {
			t.Errorf("variable %s differs from the uninterrupted run's", name)
		}
	}
}

// TestDamagedNewestCheckpointFallsBack: a truncated or bit-flipped .bin or an empty .json in the
// newest checkpoint is reported and the run resumes from the previous whole one, ending with the
// weights of an uninterrupted run.
func TestDamagedNewestCheckpointFallsBack(t *testing.T) {
	c := smallMLP(t)
	want := uninterrupted(t, c, 4)
	for _, damage := range []struct {
		name string
		do   func(base string) error
	}{
		{"truncated .bin", func(base string) error { return os.Truncate(base+".bin", 300) }},
		{"flipped byte in .bin", func(base string) error {
			b, err := os.ReadFile(base + ".bin")
			if err == nil {
				b[len(b)/2] ^= 0x10
				err = os.WriteFile(base+".bin", b, 0o666)
			}
			return err
		}},
		{"empty .json", func(base string) error { return os.WriteFile(base+".json", nil, 0o666) }},
	} {
		t.Run(damage.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "ck")
			if _, err := runIn(t, c, dir, 3, train.RunOptions{SaveEvery: 1, Keep: 3}); err != nil {
				t.Fatal(err)
			}
			bases := committed(t, dir)
			if len(bases) != 3 {
				t.Fatalf("%d checkpoints kept, want 3", len(bases))
			}
			if err := damage.do(bases[2]); err != nil {
				t.Fatal(err)
			}
			var progress strings.Builder
			h, err := runIn(t, c, dir, 4, train.RunOptions{Progress: &progress})
			if err != nil {
				t.Fatal(err)
			}
			if h.Resumed != 2 || !strings.Contains(progress.String(), "skipped damaged or partial checkpoints") ||
				!strings.Contains(progress.String(), filepath.Base(bases[2])) {
				t.Errorf("resumed at %d, want 2 with the damaged step-3 checkpoint reported; progress:\n%s", h.Resumed, progress.String())
			}
			sameWeights(t, want, weights(t, dir))
		})
	}
}

// TestNoWholeCheckpointIsRefused: a folder whose only checkpoint is damaged is not overwritten.
func TestNoWholeCheckpointIsRefused(t *testing.T) {
	c := smallMLP(t)
	dir := filepath.Join(t.TempDir(), "ck")
	if _, err := runIn(t, c, dir, 1, train.RunOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(committed(t, dir)[0]+".bin", 10); err != nil {
		t.Fatal(err)
	}
	before := files(t, dir)
	_, err := runIn(t, c, dir, 3, train.RunOptions{})
	if err == nil || !strings.Contains(err.Error(), "none is whole") {
		t.Fatalf("got %v, want an error saying no checkpoint is whole", err)
	}
	if after := files(t, dir); !maps.Equal(before, after) {
		t.Errorf("the folder changed: %v -> %v", keys(before), keys(after))
	}
}

// TestResumeWithAnotherConfigIsRefused: each setting that must match is named, with both values,
// before any graph is built, and nothing in the folder changes.
func TestResumeWithAnotherConfigIsRefused(t *testing.T) {
	gpt := tinyConfig(t)
	editGPT(&gpt, func(g *models.GPTConfig) { g.Layers = 1 })
	dir := filepath.Join(t.TempDir(), "ck")
	batches, err := data.NewText(data.Corpus, gpt.Batch, gptOf(gpt).SeqLen, 1)
	if err != nil {
		t.Fatal(err)
	}
	tr, err := train.New(embedded(), gpt)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tr.Run(batches, train.RunOptions{Steps: 1, CheckpointDir: dir}); err != nil {
		t.Fatal(err)
	}
	tr.Close()
	before := files(t, dir)

	other := gpt
	small := models.Presets["small"]
	small.Vocab = 512
	other.Model = models.GPT{Config: small}
	other.Policy = mixed.Float32
	other.LossScale = mixed.NewDynamicLossScale()
	other.Optimizer = optim.Adam8bit().Betas(0.9, 0.999).Epsilon(1e-8).Done()
	other.MicroBatches = 2                                            // may change: not listed
	other.Schedule = optim.WarmupExponentialDecay(0, 1e-2, 5, 1, 0.9) // its rates may change: not listed
	_, err = train.OpenCheckpoints(dir, other, 2)
	var mismatch *checkpoint.ConfigMismatchError
	if !errors.As(err, &mismatch) {
		t.Fatalf("got %v, want a *ConfigMismatchError", err)
	}
	for _, want := range []string{
		"model: this checkpoint was written by GPT (1 layers × 64, 2 heads of 32, sequence 64, MLP ×4, vocabulary 256, dropout 0.1); " +
			"you asked for GPT small (4 layers × 256, 4 heads of 64, sequence 128, MLP ×4, vocabulary 512",
		"policy: this checkpoint was written by params=float32,compute=bfloat16,output=float32; you asked for",
		"optimizer: this checkpoint was written by adam(b1=0.9, b2=0.999, eps=1e-08), loss scale none; you asked for adam8bit(b1=0.9, b2=0.999, eps=1e-08), loss scale dynamic(",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error does not say %q:\n%v", want, err)
		}
	}
	if len(mismatch.Differences) != 3 {
		t.Errorf("%d differences, want 3 (micro-batches and the schedule's rates may change):\n%v", len(mismatch.Differences), err)
	}
	// A run of another model on the folder: refused, nothing deleted, the GPT still resumes.
	if _, err := runIn(t, smallMLP(t), dir, 3, train.RunOptions{}); !errors.As(err, &mismatch) {
		t.Fatalf("an MLP run on a GPT folder: %v, want a *ConfigMismatchError", err)
	}
	if after := files(t, dir); !maps.Equal(before, after) {
		t.Errorf("the refused runs changed the folder: %v -> %v", keys(before), keys(after))
	}
	ck, err := train.OpenCheckpoints(dir, gpt, 2)
	if err != nil || ck.ResumeStep != 1 {
		t.Fatalf("the GPT's folder after the refusals: %v, resume step %v", err, ck)
	}
	ck.Close()
}

// TestDivergingRunKeepsGoodCheckpoints: a learning rate of 1e30 makes the loss non-finite; the run
// stops with a *DivergedError and the finite checkpoints of the first run are untouched.
func TestDivergingRunKeepsGoodCheckpoints(t *testing.T) {
	c := smallMLP(t)
	dir := filepath.Join(t.TempDir(), "ck")
	if _, err := runIn(t, c, dir, 6, train.RunOptions{SaveEvery: 2}); err != nil {
		t.Fatal(err)
	}
	before := files(t, dir)
	c.Schedule = optim.Constant(1e30) // the schedule's rate may change on resume
	h, err := runIn(t, c, dir, 10, train.RunOptions{SaveEvery: 1})
	var diverged *train.DivergedError
	if !errors.As(err, &diverged) || diverged.LastSaved != 6 {
		t.Fatalf("got %v, want a *DivergedError keeping step 6", err)
	}
	if h == nil || len(h.Steps) == 0 {
		t.Errorf("the history of the diverged run is lost: %+v", h)
	}
	t.Log(err)
	if after := files(t, dir); !maps.Equal(before, after) {
		t.Errorf("the diverging run changed the checkpoints: %v -> %v", keys(before), keys(after))
	}
}

// TestNonFiniteCheckpointIsAnError: a checkpoint holding NaN (consistent checksums: not damage) is
// refused at load, naming the variable.
func TestNonFiniteCheckpointIsAnError(t *testing.T) {
	c := smallMLP(t)
	dir := filepath.Join(t.TempDir(), "ck")
	if _, err := runIn(t, c, dir, 1, train.RunOptions{}); err != nil {
		t.Fatal(err)
	}
	base := committed(t, dir)[0]
	bin, err := os.ReadFile(base + ".bin")
	if err != nil {
		t.Fatal(err)
	}
	// Find a float32 weight of value != 0 and make it NaN: the first variables are float32.
	copy(bin[len(bin)-4:], []byte{0, 0, 0xc0, 0x7f})
	if err := os.WriteFile(base+".bin", bin, 0o666); err != nil {
		t.Fatal(err)
	}
	if err := rewriteManifest(base); err != nil {
		t.Fatal(err)
	}
	_, err = train.OpenCheckpoints(dir, c, 2)
	var nonFinite *checkpoint.NonFiniteError
	if !errors.As(err, &nonFinite) {
		t.Fatalf("got %v, want a *NonFiniteError", err)
	}
	t.Log(err)
}

// TestKeepNeverDeletesTheOnlyWholeCheckpoint: Keep bounds the whole checkpoints; a damaged newer
// one does not count and is not resumed from, and, having no manifest of onegpu's, it stays.
func TestKeepNeverDeletesTheOnlyWholeCheckpoint(t *testing.T) {
	c := smallMLP(t)
	dir := filepath.Join(t.TempDir(), "ck")
	if _, err := runIn(t, c, dir, 3, train.RunOptions{SaveEvery: 1, Keep: 1}); err != nil {
		t.Fatal(err)
	}
	bases := committed(t, dir)
	if len(bases) != 1 {
		t.Fatalf("%d checkpoints with keep 1", len(bases))
	}
	// A newer checkpoint whose data never arrived (a .json without .bin or manifest).
	partial := filepath.Join(dir, "checkpoint-n0000099-20260101-000000-step-00000004")
	meta, err := os.ReadFile(bases[0] + ".json")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(partial+".json", meta, 0o666); err != nil {
		t.Fatal(err)
	}
	h, err := runIn(t, c, dir, 5, train.RunOptions{SaveEvery: 1, Keep: 1})
	if err != nil || h.Resumed != 3 {
		t.Fatalf("resumed at %v (%v), want 3", h, err)
	}
	after := committed(t, dir)
	if len(after) != 2 || after[0] != partial || !strings.HasSuffix(after[1], "step-00000005") {
		t.Errorf("after the run with keep 1: %v, want the partial .json onegpu did not write and the step-5 checkpoint", after)
	}
}

// TestStopSavesAndSaysWhere: closing Stop ends the run after the current step with a checkpoint
// of it, and the resumed run ends where an uninterrupted one does.
func TestStopSavesAndSaysWhere(t *testing.T) {
	c := smallMLP(t)
	want := uninterrupted(t, c, 6)
	dir := filepath.Join(t.TempDir(), "ck")
	stop := make(chan struct{})
	tr, err := train.New(embedded(), c)
	if err != nil {
		t.Fatal(err)
	}
	_, err = tr.Run(stopAt{mlpData(c), 3, stop}, train.RunOptions{Steps: 6, CheckpointDir: dir, SaveEvery: 100, Stop: stop})
	tr.Close()
	var interrupted *train.InterruptedError
	if !errors.As(err, &interrupted) || interrupted.Step != 4 || err.Error() != "interrupted at step 4, saved" {
		t.Fatalf("got %v, want interrupted at step 4, saved", err)
	}
	h, err := runIn(t, c, dir, 6, train.RunOptions{})
	if err != nil || h.Resumed != 4 {
		t.Fatalf("resumed at %v (%v), want 4", h, err)
	}
	sameWeights(t, want, weights(t, dir))
}

// stopAt closes stop when the batch of step at is asked for (during that step).
type stopAt struct {
	data.Data
	at   int
	stop chan struct{}
}

// Record is the wrapped data's: a wrapper that forwards the batches forwards what checkpoints
// record of them (train.DataRecord).
func (s stopAt) Record() string { return train.DataRecord(s.Data) }

func (s stopAt) Batch(step int) []*tensors.Tensor {
	if step == s.at {
		close(s.stop)
	}
	return s.Data.Batch(step)
}

// TestSecondWriterIsRefused: while one run holds a folder, another is refused, naming the folder
// and the holder's pid; once the holder is done the folder resumes.
func TestSecondWriterIsRefused(t *testing.T) {
	c := smallMLP(t)
	dir := filepath.Join(t.TempDir(), "ck")
	holder, err := train.OpenCheckpoints(dir, c, 2)
	if err != nil {
		t.Fatal(err)
	}
	_, err = runIn(t, c, dir, 2, train.RunOptions{})
	var locked *checkpoint.FolderLockedError
	if !errors.As(err, &locked) || !strings.Contains(err.Error(), dir) || !strings.Contains(err.Error(), "pid ") {
		t.Fatalf("got %v, want a *FolderLockedError naming %s and a pid", err, dir)
	}
	holder.Close()
	if _, err := runIn(t, c, dir, 2, train.RunOptions{}); err != nil {
		t.Fatal(err)
	}
}

func keys(m map[string]string) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// TestMetricsJSONKeepsNonFiniteValues: a diverged step encodes (as strings) and decodes back.
func TestMetricsJSONKeepsNonFiniteValues(t *testing.T) {
	in := []train.StepMetrics{
		{Step: 1, Loss: 2.5, Accuracy: 0.25, Count: 16, MeanLoss: 2.5, Metrics: map[string]float64{"accuracy": 0.25}},
		{Step: 2, Loss: math.NaN(), Accuracy: math.Inf(-1), Count: math.Inf(1), MeanLoss: math.NaN(), Skipped: true},
	}
	raw, err := json.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	want := `[{"step":1,"loss":2.5,"accuracy":0.25,"count":16,"metrics":{"accuracy":0.25},"mean_loss":2.5},` +
		`{"step":2,"skipped":true,"loss":"NaN","accuracy":"-Inf","count":"+Inf","mean_loss":"NaN"}]`
	if string(raw) != want {
		t.Errorf("encoded %s\nwant    %s", raw, want)
	}
	var out []train.StepMetrics
	if err := json.Unmarshal(raw, &out); err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(out) != fmt.Sprint(in) {
		t.Errorf("decoded %+v, want %+v", out, in)
	}
}

// rewriteManifest makes a checkpoint's manifest (base + ".onegpu") match its files again after a
// test changed them on purpose: to test what a consistent checkpoint with bad values does.
func rewriteManifest(base string) error {
	raw, err := os.ReadFile(base + ".onegpu")
	if err != nil {
		return err
	}
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		return err
	}
	sum := func(suffix string) (string, int, error) {
		b, err := os.ReadFile(base + suffix)
		s := sha256.Sum256(b)
		return hex.EncodeToString(s[:]), len(b), err
	}
	var n int
	if m["json_sha256"], _, err = sum(".json"); err != nil {
		return err
	}
	if m["bin_sha256"], n, err = sum(".bin"); err != nil {
		return err
	}
	m["bin_bytes"] = n
	if raw, err = json.Marshal(m); err != nil {
		return err
	}
	return os.WriteFile(base+".onegpu", raw, 0o666)
}
