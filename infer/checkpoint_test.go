package infer_test

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/gomlx/gomlx/pkg/ml/context"

	"github.com/onegpu/onegpu/data"
	"github.com/onegpu/onegpu/infer"
	"github.com/onegpu/onegpu/internal/testkit"
	"github.com/onegpu/onegpu/mixed"
	"github.com/onegpu/onegpu/models"
	"github.com/onegpu/onegpu/optim"
	"github.com/onegpu/onegpu/platform"
	_ "github.com/onegpu/onegpu/recipes" // registers the GPT and the Llama, for train.Load
	"github.com/onegpu/onegpu/train"
)

// checkpointOf trains model 2 steps on the shipped text into a checkpoint folder and returns it
// loaded by train.Load (on the embedded backend).
func checkpointOf(t *testing.T, model train.Model) *train.Loaded {
	t.Helper()
	c := train.Config{Model: model, Batch: 4, MicroBatches: 1, Policy: mixed.Float32, Schedule: optim.Constant(3e-3), Seed: 3}
	seqLen, _ := model.(train.LanguageModel).TokenShape()
	batches, err := data.NewText(data.Corpus, c.Batch, seqLen, c.Seed)
	if err != nil {
		t.Fatal(err)
	}
	tr, err := train.New(testkit.Embedded(), c)
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	dir := filepath.Join(t.TempDir(), "ck")
	if _, err := tr.Run(batches, train.RunOptions{Steps: 2, CheckpointDir: dir}); err != nil {
		t.Fatal(err)
	}
	t.Setenv(platform.EnvBackend, "")
	t.Setenv(platform.EnvPlugin, "")
	l, err := train.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(l.Close)
	return l
}

// greedyByLogits is the reference of greedy generation: the argmax (lowest id among equals) of
// the model's own Logits over the whole sequence so far, one program per length, n times.
func greedyByLogits(t *testing.T, l *train.Loaded, prompt []int32, n int) []int32 {
	t.Helper()
	lm := l.Model.(interface {
		Logits(ctx *context.Context, tokens *graph.Node) *graph.Node
	})
	exec, err := context.NewExec(l.Backend, l.Ctx, func(ctx *context.Context, tokens *graph.Node) *graph.Node {
		l.Settings().Apply(ctx, tokens.Graph())
		return graph.ConvertDType(lm.Logits(ctx, tokens), dtypes.Float32)
	})
	if err != nil {
		t.Fatal(err)
	}
	defer exec.Finalize()
	seq := slices.Clone(prompt)
	for range n {
		outs, err := exec.Exec(tensors.FromFlatDataAndDimensions(seq, 1, len(seq)))
		if err != nil {
			t.Fatal(err)
		}
		last := outs[0].Value().([][][]float32)[0][len(seq)-1]
		best := 0
		for i, v := range last {
			if v > last[best] {
				best = i
			}
		}
		seq = append(seq, int32(best))
	}
	return seq[len(prompt):]
}

// TestGenerateFromCheckpoint: a checkpoint onegpu trained generates through train.Load and New
// (what train.Loaded's Generate did): a GPT without a cache (its learned positions end at its
// sequence length, beyond which a generation is refused) and a Llama with one, each greedy token
// the argmax of the model's own logits over the sequence so far.
func TestGenerateFromCheckpoint(t *testing.T) {
	llama, err := models.LlamaPreset("tiny")
	if err != nil {
		t.Fatal(err)
	}
	gpt := models.Presets["tiny"]
	gpt.Dropout = 0
	for _, model := range []train.Model{models.GPT{Config: gpt}, must(models.NewLlama(llama))} {
		l := checkpointOf(t, model)
		g, err := infer.New(l.Backend, l.Model, l.Ctx, l.Settings())
		if err != nil {
			t.Fatal(err)
		}
		prompt := make([]int32, 10)
		for i := range prompt {
			prompt[i] = int32(data.Corpus[1000+i])
		}
		r, err := g.Generate(prompt, infer.Options{MaxNewTokens: 6})
		if err != nil {
			t.Fatal(err)
		}
		if want := greedyByLogits(t, l, prompt, 6); !slices.Equal(r.Tokens, want) {
			t.Errorf("%s: generated %v, the argmax of its logits %v", l.Model, r.Tokens, want)
		}
		_, isGPT := model.(models.GPT)
		if r.Cached == isGPT {
			t.Errorf("%s: cached %v", l.Model, r.Cached)
		}
		if isGPT {
			if _, err := g.Generate(prompt, infer.Options{MaxNewTokens: 60}); err == nil || !strings.Contains(err.Error(), "the model reads at most 64 positions") {
				t.Errorf("the GPT beyond its 64 positions: %v", err)
			}
		}
		g.Close()
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}
