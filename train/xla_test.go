package train_test

import (
	"math"
	"testing"

	"github.com/gomlx/gomlx/backends"

	"github.com/onegpu/onegpu/analysis"
	"github.com/onegpu/onegpu/data"
	"github.com/onegpu/onegpu/internal/testkit"
	"github.com/onegpu/onegpu/mixed"
	"github.com/onegpu/onegpu/models"
	"github.com/onegpu/onegpu/train"
)

// xlaTemporaryBytes compiles config's train step with XLA and returns its temporary bytes.
func xlaTemporaryBytes(t *testing.T, backend backends.Backend, config train.Config) int64 {
	t.Helper()
	tr, err := train.New(backend, config)
	if err != nil {
		t.Fatal(err)
	}
	p, err := tr.Program()
	if err != nil {
		t.Fatal(err)
	}
	defer p.Graph.Finalize()
	compiled, err := analysis.CompileProgram(p)
	if err != nil {
		t.Fatal(err)
	}
	return compiled.TemporaryBytes
}

// TestXLAKeepsRematAndSerialization proves on a real compiler what the embedded backend cannot:
// XLA does not merge a rematerialized block's recomputation back into the forward pass (common-
// subexpression elimination would), so remat lowers its temporary memory; and it does not
// interleave the micro-batches, so 4 of them need far less than one big batch.
func TestXLAKeepsRematAndSerialization(t *testing.T) {
	t.Parallel()
	backend := xlaBackend(t)
	defer backend.Finalize()
	base := tinyConfig(t)
	small := models.Presets["small"]
	small.Layers = 2
	base.Model = models.GPT{Config: small}
	base.Batch, base.MicroBatches = 16, 1
	base.Policy = mixed.Float32
	base.Remat = train.Remat{}
	plain := xlaTemporaryBytes(t, backend, base)

	withRemat := base
	withRemat.Remat = train.Remat{Kinds: []string{"mlp", "attn"}}
	remat := xlaTemporaryBytes(t, backend, withRemat)

	micro := base
	micro.MicroBatches = 4
	serialized := xlaTemporaryBytes(t, backend, micro)

	t.Logf("XLA temporary bytes: plain %.1f MiB, remat of MLP and attention %.1f MiB (%.2fx), 4 micro-batches %.1f MiB (%.2fx)",
		mib(plain), mib(remat), float64(remat)/float64(plain), mib(serialized), float64(serialized)/float64(plain))
	if float64(remat) > 0.5*float64(plain) {
		t.Errorf("remat keeps %.2fx the temporaries of the plain step; XLA merged the recomputation back?", float64(remat)/float64(plain))
	}
	if float64(serialized) > 0.5*float64(plain) {
		t.Errorf("4 micro-batches keep %.2fx the temporaries of one batch; XLA interleaved them?", float64(serialized)/float64(plain))
	}
}

// TestXLAMicroBatchesShrinkTemporariesAtScale: at the tutorial's shapes (hidden 1024, 8 heads of
// 128, sequence 512, batch 64, bfloat16, remat of MLP and attention, dropout 0.1; 2 of its 12
// layers), on XLA's CPU backend 4 micro-batches need at most half the temporaries of one batch,
// and dropout costs at most 10% more than none. Without the layers' ties (layers.broadcastFor,
// layers.TieRandomStateTo) XLA merged the bias broadcasts of the 4 unrolled micro-batches into
// buffers that live across all of them, and drew every dropout's random bits early and kept them
// until use: 0.42x and 1.34x here; at 12 layers the step compiled to 9.8 GiB instead of 4.3.
func TestXLAMicroBatchesShrinkTemporariesAtScale(t *testing.T) {
	if testing.Short() {
		t.Skip("compiles three tutorial-sized steps")
	}
	t.Parallel()
	backend := xlaBackend(t)
	defer backend.Finalize()
	one := tinyConfig(t)
	tutorial := models.Presets["tutorial"]
	tutorial.Layers = 2
	one.Model = models.GPT{Config: tutorial}
	one.Batch, one.MicroBatches = 64, 1 // the tutorial's batch
	four := one
	four.MicroBatches = 4
	noDropout := four
	editGPT(&noDropout, func(g *models.GPTConfig) { g.Dropout = 0 })
	whole, split, plain := xlaTemporaryBytes(t, backend, one), xlaTemporaryBytes(t, backend, four), xlaTemporaryBytes(t, backend, noDropout)
	t.Logf("XLA temporary bytes: 1 micro-batch %.1f MiB, 4 micro-batches %.1f MiB (%.2fx), 4 without dropout %.1f MiB (dropout costs %.2fx)",
		mib(whole), mib(split), float64(split)/float64(whole), mib(plain), float64(split)/float64(plain))
	if ratio := float64(split) / float64(whole); ratio > 0.5 {
		t.Errorf("4 micro-batches keep %.2fx the temporaries of one batch, want at most 0.5x: XLA shares buffers across the unrolled micro-batches?", ratio)
	}
	if ratio := float64(split) / float64(plain); ratio > 1.1 {
		t.Errorf("dropout keeps %.2fx the temporaries of the same step without it, want at most 1.1x: XLA draws the random bits before they are needed?", ratio)
	}
}

func mib(b int64) float64 { return float64(b) / (1 << 20) }

// TestBFloat16OutputsOnXLA: the GPT with every dtype of its policy bfloat16 builds and runs its
// step on XLA (the accuracy's ArgMax once refused its bfloat16 logits there), with the embedded
// backend's loss within 3%: the weights are the same bits on both, but the embedded backend's
// bfloat16 element-wise results truncate where XLA's round (measured: 0.96%). (GoMLX's
// initializers left bfloat16 weights at zero, and both losses were ln 256.)
func TestBFloat16OutputsOnXLA(t *testing.T) {
	backend := xlaBackend(t)
	defer backend.Finalize()
	config := tinyConfig(t)
	editGPT(&config, func(g *models.GPTConfig) { g.Layers = 1 })
	config.Batch, config.MicroBatches = 4, 1
	var err error
	if config.Policy, err = mixed.ParsePolicy("bf16"); err != nil {
		t.Fatal(err)
	}
	step := func(b backends.Backend) train.StepMetrics {
		tr, err := train.New(b, config)
		if err != nil {
			t.Fatal(err)
		}
		defer tr.Close()
		batches, err := data.NewSyntheticTokens(config.Batch, gptOf(config).SeqLen, gptOf(config).Vocab, 3)
		if err != nil {
			t.Fatal(err)
		}
		m, err := tr.Step(batches.Batch(0))
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	onXLA, embedded := step(backend), step(testkit.Embedded())
	t.Logf("all-bfloat16 GPT, one step: XLA loss %.4f accuracy %.4f; embedded %.4f, %.4f", onXLA.Loss, onXLA.Accuracy, embedded.Loss, embedded.Accuracy)
	if math.Abs(onXLA.Loss-embedded.Loss) > 3e-2*embedded.Loss || onXLA.Accuracy < 0 || onXLA.Accuracy > 1 {
		t.Errorf("XLA: loss %v accuracy %v; embedded loss %v", onXLA.Loss, onXLA.Accuracy, embedded.Loss)
	}
}
