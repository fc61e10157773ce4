package train_test

import (
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/gomlx/gomlx/pkg/ml/context"

	"github.com/onegpu/onegpu/data"
	"github.com/onegpu/onegpu/hf"
	"github.com/onegpu/onegpu/internal/testkit"
	"github.com/onegpu/onegpu/layers"
	"github.com/onegpu/onegpu/mixed"
	"github.com/onegpu/onegpu/models"
	"github.com/onegpu/onegpu/train"
)

// packedTokens are documents of random lengths (3 to 60 tokens), a third of them with a prompt
// that carries no loss, packed for the tiny Llama (sequences of 64, vocabulary 256) in batches of
// batch sequences.
func packedTokens(t *testing.T, batch int) *data.Packed {
	t.Helper()
	rng := rand.New(rand.NewPCG(41, 42))
	tk := &data.Tokenized{Starts: []int64{0}}
	for i := range 40 {
		n := 3 + rng.IntN(58)
		for j := range n {
			tk.IDs = append(tk.IDs, int32(rng.IntN(256)))
			trained := uint8(1)
			if i%3 == 0 && j < n/2 {
				trained = 0
			}
			tk.Trained = append(tk.Trained, trained)
		}
		tk.Starts = append(tk.Starts, int64(len(tk.IDs)))
	}
	d, err := data.NewPacked(&data.TokenizedText{Source: "test", Kind: "test", Tokenized: tk}, 64, batch, 256, 5)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// packedLlama is llamaReference on packed documents (packedTokens), in batches of 4.
func packedLlama(t *testing.T) train.Config {
	c := llamaReference(t)
	c.Batch = 4
	m := c.Model.(models.Llama)
	m.Packed = true
	c.Model = m
	return c
}

// TestPackedLossIsExactInMicroBatches: the tiny Llama on packed documents, whose sequences hold
// different numbers of loss-carrying targets: its loss is the mean over the whole batch's
// loss-carrying targets, the same with 1 or 4 micro-batches within 1e-6 (float32), and streamed
// (--offload params, its block programs reading the segments and positions) and staged (--offload
// staged, the same programs) within 1e-6 at the first step and 1e-5 after.
func TestPackedLossIsExactInMicroBatches(t *testing.T) {
	const steps = 2
	batches := packedTokens(t, 4)
	counts := map[float32]bool{}
	weights := tensors.MustCopyFlatData[float32](batches.Batch(0)[4])
	for r := range 4 {
		var n float32
		for _, w := range weights[64*r : 64*r+64] {
			n += w
		}
		counts[n] = true
	}
	if len(counts) < 2 {
		t.Fatalf("the first batch's sequences all carry the same number of targets (%v): a mean of means would pass", counts)
	}
	losses := func(edit func(c *train.Config)) []float64 {
		c := packedLlama(t)
		edit(&c)
		tr, err := train.New(embedded(), c)
		if err != nil {
			t.Fatal(err)
		}
		defer tr.Close()
		h, err := tr.Run(batches, train.RunOptions{Steps: steps})
		if err != nil {
			t.Fatal(err)
		}
		var out []float64
		for _, s := range h.Steps {
			out = append(out, s.Loss)
		}
		return out
	}
	want := losses(func(*train.Config) {})
	for _, c := range []struct {
		name string
		edit func(c *train.Config)
	}{
		{"4 micro-batches", func(c *train.Config) { c.MicroBatches = 4 }},
		{"streamed, 2 micro-batches", func(c *train.Config) { c.MicroBatches, c.Offload = 2, train.OffloadParams }},
		{"staged, 2 micro-batches", func(c *train.Config) { c.MicroBatches, c.Offload = 2, train.OffloadStaged }},
	} {
		got := losses(c.edit)
		for i := range steps {
			tol := 1e-6
			if i > 0 {
				tol = 1e-5
			}
			rel := math.Abs(got[i]-want[i]) / want[i]
			if rel > tol {
				t.Errorf("%s: step %d loss %.8g, one micro-batch %.8g (relative %.2g > %g)", c.name, i, got[i], want[i], rel, tol)
			}
			t.Logf("%s: step %d loss %.8g vs %.8g (relative %.2g)", c.name, i, got[i], want[i], rel)
		}
	}
}

// TestPackedLossMatchesTransformers: the fixture's 60 prompt/completion records (the ids and
// loss-carrying targets transformers' fixture script computed), packed into 26 sequences of 128
// (two or three a sequence, 95.3% filled): the packed batches' loss sum over the committed Llama equals the sum of the
// records' losses transformers computed each alone with labels -100 on the prompt, within 1e-5
// relative in float32; the count of targets is theirs; so the completion-only mean is
// transformers' too. Plain and chunked attention and loss.
func TestPackedLossMatchesTransformers(t *testing.T) {
	fx := testkit.ReadTextFixture(t, "llama3_untied")
	tk := &data.Tokenized{Starts: []int64{0}}
	var wantSum float64
	var wantCount int
	for _, r := range fx.NoteRecords {
		for j, id := range r.IDs {
			tk.IDs, tk.Trained = append(tk.IDs, int32(id)), append(tk.Trained, uint8(r.Trained[j]))
		}
		tk.Starts = append(tk.Starts, int64(len(tk.IDs)))
		wantSum += r.LossSum
		wantCount += r.Count
	}
	const seq, batch = 128, 4
	packed, err := data.NewPacked(&data.TokenizedText{Source: "notes", Kind: "prompt/completion", Tokenized: tk}, seq, batch, 256, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s", packed.Packing())
	p, err := hf.Open(context.New(), fx.Dir, dtypes.Float32, seq)
	if err != nil {
		t.Fatal(err)
	}
	m := p.Model.(models.Llama)
	m.Packed = true
	for _, chunked := range []bool{false, true} {
		loaded := &train.Loaded{Model: m, Policy: mixed.Float32, Backend: embedded(), Ctx: p.Ctx}
		if chunked {
			loaded.Attention, loaded.CrossEntropy = layers.Attention{Chunked: true, Block: 48}, layers.CrossEntropy{Chunk: 100}
		}
		var sum, count float64
		for i := range packed.EvalBatches() {
			b := packed.EvalBatch(i)
			mean, _, err := loaded.Loss(b)
			if err != nil {
				t.Fatal(err)
			}
			var n float64
			for _, w := range tensors.MustCopyFlatData[float32](b[4]) {
				n += float64(w)
			}
			sum, count = sum+mean*n, count+n
		}
		rel := math.Abs(sum-wantSum) / wantSum
		if rel > 1e-5 || count != float64(wantCount) {
			t.Errorf("chunked %v: packed loss sum %.6f over %g targets; transformers, each record alone: %.6f over %d (relative %.2g)",
				chunked, sum, count, wantSum, wantCount, rel)
		}
		t.Logf("chunked %v: completion-only loss %.7f, transformers %.7f (sums relative %.2g)", chunked, sum/count, wantSum/float64(wantCount), rel)
	}
}

// oneBatch is evaluation data of one training batch.
type oneBatch []*tensors.Tensor

func (b oneBatch) EvalBatches() int                { return 1 }
func (b oneBatch) EvalBatch(int) []*tensors.Tensor { return b }

// TestEvaluate: the evaluation loss of a batch with the initial weights is the loss the first
// train step reports for it (computed before its update), within 1e-6, with 1 or 4
// micro-batches; a run with Eval evaluates every EvalEvery steps and after the last, and its
// progress lines and summary show the evaluation loss.
func TestEvaluate(t *testing.T) {
	batches := packedTokens(t, 4)
	for _, k := range []int{1, 4} {
		c := packedLlama(t)
		c.MicroBatches = k
		tr, err := train.New(embedded(), c)
		if err != nil {
			t.Fatal(err)
		}
		if err := tr.Initialize(); err != nil {
			t.Fatal(err)
		}
		before, err := tr.Evaluate(oneBatch(batches.Batch(0)))
		if err != nil {
			t.Fatal(err)
		}
		step, err := tr.Step(batches.Batch(0))
		if err != nil {
			t.Fatal(err)
		}
		if rel := math.Abs(before.Loss-step.Loss) / step.Loss; rel > 1e-6 || before.Count != step.Count {
			t.Errorf("%d micro-batches: evaluation loss %.8g over %g, the step's %.8g over %g (relative %.2g)", k, before.Loss, before.Count,
				step.Loss, step.Count, rel)
		}
		tr.Close()
	}
	tr, err := train.New(embedded(), packedLlama(t))
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	var progress strings.Builder
	h, err := tr.Run(batches, train.RunOptions{Steps: 5, Eval: batches, EvalEvery: 2, LogEvery: 10, Progress: &progress})
	if err != nil {
		t.Fatal(err)
	}
	var steps []int
	for _, p := range h.Eval {
		steps = append(steps, p.Step)
		if p.Count != float64(batches.Packing().LossTokens) {
			t.Errorf("evaluation at step %d counts %g targets, the data has %d", p.Step, p.Count, batches.Packing().LossTokens)
		}
	}
	if want := []int{2, 4, 5}; !slices.Equal(steps, want) {
		t.Errorf("evaluated after steps %v, want %v", steps, want)
	}
	var summary strings.Builder
	h.WriteSummary(&summary)
	t.Logf("%s%s", progress.String(), summary.String())
	if n := strings.Count(progress.String(), "eval loss"); n != 3 || !strings.Contains(summary.String(), "eval loss") {
		t.Errorf("%d progress lines with the evaluation loss, want 3:\n%s\nsummary:\n%s", n, progress.String(), summary.String())
	}
}
