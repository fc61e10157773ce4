package hf_test

import (
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/gomlx/gomlx/pkg/ml/context"

	"github.com/onegpu/onegpu/data"
	"github.com/onegpu/onegpu/hf"
	"github.com/onegpu/onegpu/infer"
	"github.com/onegpu/onegpu/internal/testkit"
	"github.com/onegpu/onegpu/mixed"
	"github.com/onegpu/onegpu/optim"
	"github.com/onegpu/onegpu/train"
)

// The tests here use hf as a library user does, with the trainer: Open's model and weights
// evaluated by a train.Loaded, and trained by a train.Trainer.

// TestOpenEvaluates: the committed transformers fixture opened with Open and evaluated as a
// train.Loaded, its tokens read from the committed .npy (the fixture's own ids: checked here): its
// mean next-token loss is transformers' (the fixture's float32 logits, cross-entropy in float64)
// within 1e-6 relative, and infer's greedy next token after each prefix of the first sequence is
// the argmax of transformers' logits there.
func TestOpenEvaluates(t *testing.T) {
	fx := testkit.ReadHFFixture(t, "llama3_untied")
	p, err := hf.Open(context.New(), fx.Dir, dtypes.Float32, fx.Seq-1)
	if err != nil {
		t.Fatal(err)
	}
	m := &train.Loaded{Model: p.Model.(train.Model), Policy: mixed.Float32, Backend: testkit.Embedded(), Ctx: p.Ctx}
	defer m.Close()
	inputs, labels := fx.NextTokens()
	ids, err := data.ReadTokens(fx.Dir+".tokens.npy", fx.Batch, fx.Seq-1, 1<<20, 0)
	if err != nil {
		t.Fatal(err)
	}
	batch := ids.Sequences(0, ids.Rows())
	if got := [][]int32{tensors.MustCopyFlatData[int32](batch[0]), tensors.MustCopyFlatData[int32](batch[1])}; !slices.Equal(got[0], inputs) || !slices.Equal(got[1], labels) {
		t.Fatalf("%s.tokens.npy holds other ids than its .logits.safetensors: %v, want %v", fx.Dir, got, [][]int32{inputs, labels})
	}
	loss, _, err := m.Loss(batch)
	if err != nil {
		t.Fatal(err)
	}
	want, _ := fx.CrossEntropy()
	if math.Abs(loss-want) > 1e-6*want {
		t.Errorf("loss %.8f, transformers' %.8f", loss, want)
	}

	vocab := len(fx.Logits) / len(fx.Tokens)
	g, err := infer.New(m.Backend, m.Model, m.Ctx, m.Settings())
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	for _, k := range []int{1, 5, fx.Seq - 1} {
		prefix := inputs[:k]
		r, err := g.Generate(prefix, infer.Options{MaxNewTokens: 1})
		if err != nil {
			t.Fatal(err)
		}
		next := r.Tokens
		row := fx.Logits[(k-1)*vocab : k*vocab]
		best := 0
		for i, v := range row {
			if v > row[best] {
				best = i
			}
		}
		if int(next[0]) != best {
			t.Errorf("after %d tokens: generated %d, transformers' argmax %d", k, next[0], best)
		}
	}
}

// TestOpenRefuses: a folder without config.json and a sequence longer than the model reads are
// errors naming them.
func TestOpenRefuses(t *testing.T) {
	fx := testkit.ReadHFFixture(t, "llama3_untied")
	if _, err := hf.Open(context.New(), t.TempDir(), dtypes.Float32, 0); err == nil || !strings.Contains(err.Error(), "config.json") {
		t.Errorf("a folder without config.json: %v", err)
	}
	if _, err := hf.Open(context.New(), fx.Dir, dtypes.Float32, 1<<30); err == nil || !strings.Contains(err.Error(), "1073741824") {
		t.Errorf("sequence 2^30: %v", err)
	}
	if _, err := hf.Open(context.New(), fx.Dir, dtypes.Float32, -1); err == nil || !strings.Contains(err.Error(), "sequence length -1") {
		t.Errorf("sequence -1: %v", err)
	}
}

// TestOpenTrains: weights opened into a trainer's context (Trainer.SetWeights) are those the
// trainer's step reads: the first step's loss on each committed fixture's tokens is the
// cross-entropy of transformers' logits (float64 from them, within 1e-5 relative), and after two
// steps Export of the trainer's context, opened again, gives every trained parameter bit for bit.
func TestOpenTrains(t *testing.T) {
	for _, name := range testkit.HFFixtureNames(t) {
		t.Run(name, func(t *testing.T) {
			fx := testkit.ReadHFFixture(t, name)
			layout, err := hf.ReadConfig(fx.Dir, fx.Seq-1)
			if err != nil {
				t.Fatal(err)
			}
			config := train.Config{Model: layout.Model().(train.Model), Batch: fx.Batch, Policy: mixed.Float32, Schedule: optim.Constant(1e-3), Seed: 5}
			tr, err := train.New(testkit.Embedded(), config)
			if err != nil {
				t.Fatal(err)
			}
			defer tr.Close()
			err = tr.SetWeights(func(ctx *context.Context) error {
				_, err := hf.Open(ctx, fx.Dir, dtypes.Float32, fx.Seq-1)
				return err
			})
			if err != nil {
				t.Fatal(err)
			}
			inputs, labels := fx.NextTokens()
			batch := []*tensors.Tensor{tensors.FromFlatDataAndDimensions(inputs, fx.Batch, fx.Seq-1), tensors.FromFlatDataAndDimensions(labels, fx.Batch, fx.Seq-1)}
			first, err := tr.Step(batch)
			if err != nil {
				t.Fatal(err)
			}
			want, _ := fx.CrossEntropy()
			t.Logf("first step's loss %.7f, transformers' logits give %.7f", first.Loss, want)
			if rel := math.Abs(first.Loss-want) / want; !(rel < 1e-5) {
				t.Errorf("first step's loss %v, transformers' logits give %v (rel. %.2g): the step does not read the loaded weights", first.Loss, want, rel)
			}
			if _, err := tr.Step(batch); err != nil {
				t.Fatal(err)
			}
			dir := t.TempDir()
			if err := hf.Export(tr.Ctx, dir, config.Model, hf.ExportOptions{}); err != nil {
				t.Fatal(err)
			}
			loaded := context.New()
			if _, err := hf.Open(loaded, dir, dtypes.Float32, 0); err != nil {
				t.Fatal(err)
			}
			trained, back := testkit.Variables(t, tr.Ctx), testkit.Variables(t, loaded)
			n := 0
			for v := range tr.Ctx.IterVariables() {
				if !v.Trainable {
					continue
				}
				n++
				if got, ok := back[v.ScopeAndName()]; !ok || !got.Equal(trained[v.ScopeAndName()]) {
					t.Errorf("%s: exported and read back, not the trained value", v.ScopeAndName())
				}
			}
			if n != len(back) {
				t.Errorf("%d trained parameters, %d exported", n, len(back))
			}
		})
	}
}
