package train_test

import (
	"fmt"
	"math"
	"os"
	"strings"
	"testing"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/gomlx/gomlx/pkg/ml/context"
	"github.com/gomlx/gomlx/pkg/ml/context/checkpoints"

	"github.com/onegpu/onegpu/data"
	"github.com/onegpu/onegpu/internal/testkit"
	"github.com/onegpu/onegpu/mixed"
	"github.com/onegpu/onegpu/models"
	"github.com/onegpu/onegpu/optim"
	"github.com/onegpu/onegpu/platform"
	"github.com/onegpu/onegpu/train"
)

// xlaBackend opens the XLA plugin of $ONEGPU_PJRT_PLUGIN, or skips.
func xlaBackend(t testing.TB) backends.Backend {
	t.Helper()
	backend, err := platform.NewBackend("xla:" + testkit.XLAPlugin(t))
	if err != nil {
		t.Fatal(err)
	}
	return backend
}

// fourDevices opens the XLA plugin, which must have at least 4 devices (the CPU plugin has), or
// skips.
func fourDevices(t testing.TB) backends.Backend {
	t.Helper()
	backend := xlaBackend(t)
	if backend.NumDevices() < 4 {
		backend.Finalize()
		t.Skipf("the plugin has %d devices; this needs 4", backend.NumDevices())
	}
	return backend
}

// runLosses trains config up to step `to` as runOffload does and returns the trainer (still open)
// and the losses of the steps it ran.
func runLosses(t *testing.T, backend backends.Backend, config train.Config, to int, dir string) (*train.Trainer, []float64) {
	t.Helper()
	tr, h := runOffload(t, backend, config, to, dir)
	var losses []float64
	for _, m := range h.Steps {
		losses = append(losses, m.Loss)
	}
	return tr, losses
}

// float32Config is the tiny GPT (one block) in float32 with remat of MLP and attention, without dropout
// (random masks differ with the partitioning), a batch of 16 sequences in 2 micro-batches: two
// sequences per device and micro-batch on 4 devices. One block and two micro-batches keep the
// unrolled graph, and so its compilations, small.
func float32Config(t *testing.T) train.Config {
	c := tinyConfig(t)
	c.Policy, c.MicroBatches = mixed.Float32, 2
	editGPT(&c, func(g *models.GPTConfig) { g.Dropout, g.Layers = 0, 1 })
	return c
}

func assertClose(t *testing.T, what string, got, want []float64, tol float64) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d losses, want %d", what, len(got), len(want))
	}
	for i := range want {
		rel := math.Abs(got[i]-want[i]) / math.Abs(want[i])
		t.Logf("%s: loss %d: %.7f vs %.7f on 1 device (rel. %.1e)", what, i+1, got[i], want[i], rel)
		if rel > tol || math.IsNaN(got[i]) {
			t.Errorf("%s: loss %d is %.7f, one device gives %.7f: rel. difference %.2g > %g", what, i+1, got[i], want[i], rel, tol)
		}
	}
}

// TestDevicesMatchOneDevice: the tiny GPT in float32 trained on 4 devices of the XLA CPU plugin
// gives the losses of one device (same global batch and seed), replicated and with everything
// sharded; a checkpoint written with everything sharded on 4 devices holds their state bit for
// bit and resumes on 1 device and on 2 devices with sharded optimizer state, with the one-device
// losses. (BenchmarkDevices compares every mode over more steps.)
func TestDevicesMatchOneDevice(t *testing.T) {
	t.Parallel()
	backend := fourDevices(t)
	defer backend.Finalize()
	const steps = 4
	config := float32Config(t)
	ref, want := runLosses(t, backend, config, steps, "")
	ref.Close()

	c := config
	c.Devices = train.Devices{Count: 4}
	tr, got := runLosses(t, backend, c, steps, "")
	tr.Close()
	assertClose(t, "4 devices, shard none", got, want, 1e-5)

	// Everything sharded: two steps, a checkpoint, two more steps.
	dir := t.TempDir()
	c.Devices = train.Devices{Count: 4, Shard: train.ShardParams}
	sharded, got := runLosses(t, backend, c, 2, dir)
	saved := testkit.Variables(t, sharded.Ctx)
	batches, err := data.NewSyntheticTokens(c.Batch, gptOf(c).SeqLen, gptOf(c).Vocab, 3)
	if err != nil {
		t.Fatal(err)
	}
	h, err := sharded.Run(batches, train.RunOptions{Steps: steps})
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range h.Steps {
		got = append(got, m.Loss)
	}
	sharded.Close()
	assertClose(t, "4 devices, shard params", got, want, 1e-5)

	for _, devices := range []train.Devices{{Count: 1}, {Count: 2, Shard: train.ShardOptimizer}} {
		c := config
		c.Devices = devices
		// Each resume gets its own copy: a run saves its final checkpoint into its folder.
		copied := t.TempDir()
		if err := os.CopyFS(copied, os.DirFS(dir)); err != nil {
			t.Fatal(err)
		}
		tr, resumed := runLosses(t, backend, c, steps, copied)
		tr.Close()
		assertClose(t, fmt.Sprintf("resumed on %d device(s), shard %s", max(devices.Count, 1), devices.Shard), resumed, want[2:], 1e-5)
	}

	// The checkpoint holds, bit for bit, what the 4 devices held (shards merged).
	ctx := context.New()
	if _, err := checkpoints.Load(ctx).Dir(dir).Immediate().Done(); err != nil {
		t.Fatal(err)
	}
	loaded := testkit.Variables(t, ctx)
	for name, want := range saved {
		if got, ok := loaded[name]; !ok || !got.Equal(want) {
			t.Errorf("variable %s: the checkpoint holds %v, the 4 devices held another value", name, got)
		}
	}
}

// TestDevicesSkipNonFiniteOnAllDevices: a non-finite gradient on one device (a NaN in one example
// of the batch, which lands on device 2) skips the step on every device: the sharded weights and
// Adam's moments keep their values bit for bit and the skip is counted.
func TestDevicesSkipNonFiniteOnAllDevices(t *testing.T) {
	backend := fourDevices(t)
	defer backend.Finalize()
	classifier := models.TutorialClassifier
	classifier.Dropout = 0
	config := train.Config{Model: models.Classifier{Config: classifier}, Batch: 64, MicroBatches: 2, Policy: mixed.Float32,
		LossScale: mixed.NewDynamicLossScale(), Schedule: optim.Constant(1e-3), Seed: 1,
		Devices: train.Devices{Count: 4, Shard: train.ShardParams}}
	tr, err := train.New(backend, config)
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	batches, err := data.NewClassifierBatch(config.Batch, classifier.Inputs, classifier.Classes, 5)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tr.Step(batches.Batch(0)); err != nil {
		t.Fatal(err)
	}
	before := testkit.Variables(t, tr.Ctx)

	batch := batches.Batch(1)
	poisoned, err := batch[0].LocalClone()
	if err != nil {
		t.Fatal(err)
	}
	tensors.MutableFlatData(poisoned, func(x []float32) { x[40*classifier.Inputs+3] = float32(math.NaN()) }) // example 40: device 2
	if _, err := tr.Step([]*tensors.Tensor{poisoned, batch[1]}); err != nil {
		t.Fatal(err)
	}
	after := testkit.Variables(t, tr.Ctx)
	skipped := after[optim.DefaultScope+"/"+optim.SkippedStepsVariable]
	if skipped == nil || tensors.ToScalar[int64](skipped) != 1 {
		t.Fatalf("skipped steps = %v, want 1", skipped)
	}
	for name, want := range before {
		if strings.HasPrefix(name, optim.DefaultScope) || strings.Contains(name, "loss_scale") || strings.Contains(name, "#rngState") {
			continue // the skip's own bookkeeping changes
		}
		if !after[name].Equal(want) {
			t.Errorf("%s changed in a step with a NaN gradient on one device", name)
		}
	}
}

// TestDevicesRefuseWhatCannotSplit: bad device settings are errors that name the fix, before any
// work.
func TestDevicesRefuseWhatCannotSplit(t *testing.T) {
	base := float32Config(t)
	for _, tc := range []struct {
		devices train.Devices
		batch   int
		want    string
	}{
		{train.Devices{Count: 3}, 16, "does not split across 3 devices"},
		{train.Devices{Count: 4}, 12, "each device gets 3 examples of the batch of 12, which do not split into 2 micro-batches"},
		{train.Devices{Count: 1, Shard: train.ShardParams}, 16, "Config.Devices.Shard params needs several devices"},
	} {
		c := base
		c.Devices, c.Batch = tc.devices, tc.batch
		err := c.Validate()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v, batch %d: error %v, want one saying %q", tc.devices, tc.batch, err, tc.want)
		}
	}
	c := base
	c.Devices = train.Devices{Count: 2}
	_, err := train.New(embedded(), c)
	if err == nil || !strings.Contains(err.Error(), "XLA PJRT plugin") {
		t.Errorf("2 devices on the embedded backend: error %v, want one that says to use an XLA PJRT plugin", err)
	}
	if _, err := train.ParseShard("zero3"); err == nil || !strings.Contains(err.Error(), "none") {
		t.Errorf("ParseShard(zero3) = %v, want an error listing the modes", err)
	}
}
