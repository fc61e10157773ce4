package models_test

import (
	"math"
	"testing"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/gomlx/gomlx/pkg/ml/context"

	"github.com/onegpu/onegpu/internal/testkit"
	"github.com/onegpu/onegpu/layers"
	"github.com/onegpu/onegpu/models"
	"github.com/onegpu/onegpu/remat"
	"github.com/onegpu/onegpu/train"
)

// The Llama is a language model the trainer trains.
var _ train.LanguageModel = models.Llama{}

func init() {
	tieCases = append(tieCases,
		llamaTieCase("Llama MLP", models.KindMLP, 2),             // gate and up (down's gradient needs its input only)
		llamaTieCase("Llama attention", models.KindAttention, 5), // q, k, v, scores, weighted values
		llamaTieCase("Llama block", models.KindBlock, 8),         // the attention's five and o_proj (the MLP reads the residual it feeds), the MLP's two
	)
}

// llamaTieCase is the tiny Llama preset (float32, tied embeddings) with one kind of block
// rematerialized.
func llamaTieCase(name, kind string, perLayer int) tieCase {
	c, err := models.LlamaPreset("tiny")
	if err != nil {
		panic(err)
	}
	tokens := shapes.Make(dtypes.Int32, tieBatch, c.SeqLen)
	return tieCase{name: name, inputs: []shapes.Shape{tokens, tokens}, recomputed: perLayer * c.Layers,
		loss: func(ctx *context.Context, in []*graph.Node, rematerialized bool) *graph.Node {
			m, err := models.NewLlama(c) // float32: no policy is set on the context
			if err != nil {
				panic(err)
			}
			if rematerialized {
				remat.SetBlocks(ctx, remat.With(remat.NothingSaveable), kind)
			}
			loss, _ := m.Loss(ctx, in)
			return graph.Div(loss.Sum, loss.Count)
		}}
}

// TestLlamaLossIsCrossEntropyAndAccuracy: the Llama's train.Model loss is its summed cross-entropy
// over every target, and its accuracy metric counts the targets whose logit is the largest,
// recomputed here in float64 from the model's logits; with a chunked cross-entropy on the context
// (layers.SetCrossEntropy, as the trainer sets Config.CrossEntropy) the loss is the same within
// 1e-6 and the count of right predictions identical.
func TestLlamaLossIsCrossEntropyAndAccuracy(t *testing.T) {
	c := tinyLlama(false)
	m, err := models.NewLlama(c)
	if err != nil {
		t.Fatal(err)
	}
	const batch = 3
	tokens, labels := randomTokens(4, c.Vocab, batch, c.SeqLen), randomTokens(5, c.Vocab, batch, c.SeqLen)
	backend := testkit.Embedded()
	ctx := context.New().Checked(false) // the loss and the logits share the variables
	run := func(chunk int) (loss, count, correct float64, logits []float64) {
		exec, err := context.NewExec(backend, ctx, func(ctx *context.Context, tokens, labels *graph.Node) []*graph.Node {
			layers.SetCrossEntropy(ctx, layers.CrossEntropy{Chunk: chunk})
			l, metrics := m.Loss(ctx, []*graph.Node{tokens, labels})
			return []*graph.Node{l.Sum, l.Count, metrics[0].Sum, metrics[0].Count, m.Logits(ctx, tokens)}
		})
		if err != nil {
			t.Fatal(err)
		}
		defer exec.Finalize()
		out, err := exec.Exec(tensors.FromFlatDataAndDimensions(tokens.Ints, tokens.Dims...), tensors.FromFlatDataAndDimensions(labels.Ints, labels.Dims...))
		if err != nil {
			t.Fatal(err)
		}
		if n := testkit.Floats(out[3])[0]; n != testkit.Floats(out[1])[0] {
			t.Errorf("the accuracy counts %v targets, the loss %v", n, testkit.Floats(out[1])[0])
		}
		return testkit.Floats(out[0])[0], testkit.Floats(out[1])[0], testkit.Floats(out[2])[0], testkit.Floats(out[4])
	}
	loss, count, correct, logits := run(0)
	var wantLoss, wantCorrect float64
	for i, label := range labels.Ints {
		row := logits[i*c.Vocab : (i+1)*c.Vocab]
		best, sum := 0, 0.0
		for j, v := range row {
			if v > row[best] {
				best = j
			}
			sum += math.Exp(v - row[0])
		}
		wantLoss += math.Log(sum) + row[0] - row[label]
		if best == int(label) {
			wantCorrect++
		}
	}
	if count != float64(len(labels.Ints)) || math.Abs(loss-wantLoss) > 1e-6*wantLoss || correct != wantCorrect {
		t.Errorf("loss %v over %v targets, %v right; float64 from the logits: %v over %d, %v right", loss, count, correct, wantLoss, len(labels.Ints), wantCorrect)
	}
	chunkedLoss, chunkedCount, chunkedCorrect, _ := run(7)
	if chunkedCount != count || math.Abs(chunkedLoss-loss) > 1e-6*loss || chunkedCorrect != correct {
		t.Errorf("chunked: loss %v over %v, %v right; plain: %v over %v, %v right", chunkedLoss, chunkedCount, chunkedCorrect, loss, count, correct)
	}
}

// TestLlamaDescribesItself: String names the preset a config is, and the sizes of any.
func TestLlamaDescribesItself(t *testing.T) {
	c, _ := models.LlamaPreset("llama-3.2-1b")
	m, _ := models.NewLlama(c)
	if s := m.String(); s[:len("Llama llama-3.2-1b (16 layers × 2048")] != "Llama llama-3.2-1b (16 layers × 2048" {
		t.Errorf("String() = %q", s)
	}
	c.Layers = 3
	if s := (models.Llama{Config: c}).String(); s[:len("Llama (3 layers")] != "Llama (3 layers" {
		t.Errorf("String() of a changed preset = %q", s)
	}
	if kinds := m.RematKinds(); len(kinds) != 3 {
		t.Errorf("RematKinds() = %v", kinds)
	}
}
