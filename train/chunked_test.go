package train_test

import (
	"errors"
	"math"
	"path/filepath"
	"strings"
	"testing"

	"github.com/onegpu/onegpu/analysis"
	"github.com/onegpu/onegpu/data"
	"github.com/onegpu/onegpu/layers"
	"github.com/onegpu/onegpu/mixed"
	"github.com/onegpu/onegpu/models"
	"github.com/onegpu/onegpu/train"
	"github.com/onegpu/onegpu/train/checkpoint"
)

// TestChunkedRunResumesPlainRun: Config.Attention and Config.CrossEntropy reach the model (the
// chunked step is another program) and change how a step computes, not what: a float32 run of 2
// plain steps resumed for 2 chunked steps (attention blocks of 16, loss chunks of 100 tokens of
// the batch's 1024) gives the uninterrupted plain run's losses within 1e-5 relative. A GPT resumed
// at another sequence length is refused: its positions are learned.
func TestChunkedRunResumesPlainRun(t *testing.T) {
	plain := tinyConfig(t)
	plain.Policy, plain.MicroBatches = mixed.Float32, 1
	editGPT(&plain, func(g *models.GPTConfig) { g.Layers, g.Dropout = 1, 0 })
	chunked := plain
	chunked.Attention = layers.Attention{Chunked: true, Block: 16}
	chunked.CrossEntropy = layers.CrossEntropy{Chunk: 100}
	batches, err := data.NewText(data.Corpus, plain.Batch, gptOf(plain).SeqLen, 3)
	if err != nil {
		t.Fatal(err)
	}
	run := func(c train.Config, dir string, steps int) []train.StepMetrics {
		tr, err := train.New(embedded(), c)
		if err != nil {
			t.Fatal(err)
		}
		defer tr.Close()
		h, err := tr.Run(batches, train.RunOptions{Steps: steps, CheckpointDir: dir})
		if err != nil {
			t.Fatal(err)
		}
		return h.Steps
	}
	nodes := func(c train.Config) int {
		tr, err := train.New(embedded(), c)
		if err != nil {
			t.Fatal(err)
		}
		defer tr.Close()
		p, err := tr.Program()
		if err != nil {
			t.Fatal(err)
		}
		defer p.Graph.Finalize()
		return analysis.Analyze(p).ExecutedNodes
	}
	if a, b := nodes(plain), nodes(chunked); a == b {
		t.Errorf("the chunked step runs %d ops, as many as the plain one: the options did not reach the model", b)
	}
	straight := run(plain, filepath.Join(t.TempDir(), "straight"), 4)
	dir := filepath.Join(t.TempDir(), "resumed")
	resumed := append(run(plain, dir, 2), run(chunked, dir, 4)...)
	if len(resumed) != 4 {
		t.Fatalf("the resumed run did %d steps, want 4", len(resumed))
	}
	for i := range straight {
		if rel := math.Abs(resumed[i].Loss-straight[i].Loss) / straight[i].Loss; rel > 1e-5 {
			t.Errorf("step %d: plain loss %.7g, resumed chunked %.7g (relative %.2g), want <= 1e-5", i+1, straight[i].Loss, resumed[i].Loss, rel)
		}
	}
	longer := chunked
	editGPT(&longer, func(g *models.GPTConfig) { g.SeqLen *= 2 })
	var mismatch *checkpoint.ConfigMismatchError
	if _, err := train.OpenCheckpoints(dir, longer, 2); !errors.As(err, &mismatch) || !strings.Contains(err.Error(), "sequence 128") {
		t.Errorf("resuming the GPT at sequence 128: %v, want a *ConfigMismatchError naming the sequence", err)
	}
}

// TestChunkingErrors: invalid blocks and chunks, and chunking a model that is not a language
// model, are errors naming the setting.
func TestChunkingErrors(t *testing.T) {
	for _, tc := range []struct {
		change func(c *train.Config)
		want   string
	}{
		{func(c *train.Config) { c.Attention = layers.Attention{Chunked: true, Block: -4} }, "blocks must be positive"},
		{func(c *train.Config) { c.Attention = layers.Attention{Block: 64} }, "need Chunked"},
		{func(c *train.Config) { c.CrossEntropy = layers.CrossEntropy{Chunk: -1} }, "cross-entropy chunk -1"},
		{func(c *train.Config) { *c = smallMLP(t); c.CrossEntropy = layers.CrossEntropy{Chunk: 8} }, "is not a language model"},
		{func(c *train.Config) { *c = smallMLP(t); c.Attention = layers.Attention{Chunked: true} }, "no attention or token loss to chunk"},
		{func(c *train.Config) { c.MLP = layers.MLP{Chunk: -1} }, "mlp chunk -1"},
		{func(c *train.Config) { c.MLP = layers.MLP{Chunk: 8} }, "computes its MLP whole"},
	} {
		c := tinyConfig(t)
		tc.change(&c)
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Validate: %v, want an error containing %q", err, tc.want)
		}
	}
}
