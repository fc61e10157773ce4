package models_test

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/gomlx/gomlx/pkg/ml/context"

	"github.com/onegpu/onegpu/accum"
	"github.com/onegpu/onegpu/internal/testkit"
	"github.com/onegpu/onegpu/layers"
	"github.com/onegpu/onegpu/models"
)

// packedDoc is a document of a packed batch: its tokens and how many of them, from the start, are
// a prompt (read, not learned: the targets that are prompt tokens carry no loss).
type packedDoc struct {
	tokens []int32
	prompt int
}

// packedBatch lays documents out as data.Packed does: each row's documents end to end (a document
// of n tokens fills n-1 positions), then padding; it returns tokens, targets, segments, positions
// and weights [rows, seq].
func packedBatch(rows [][]packedDoc, seq int) []*tensors.Tensor {
	n := len(rows) * seq
	tokens, targets, segments, positions := make([]int32, n), make([]int32, n), make([]int32, n), make([]int32, n)
	weights := make([]float32, n)
	for r, docs := range rows {
		at := r * seq
		for s, d := range docs {
			for i := range len(d.tokens) - 1 {
				tokens[at], targets[at], segments[at], positions[at] = d.tokens[i], d.tokens[i+1], int32(s+1), int32(i)
				if i+1 >= d.prompt {
					weights[at] = 1
				}
				at++
			}
		}
	}
	dims := []int{len(rows), seq}
	return []*tensors.Tensor{tensors.FromFlatDataAndDimensions(tokens, dims...), tensors.FromFlatDataAndDimensions(targets, dims...),
		tensors.FromFlatDataAndDimensions(segments, dims...), tensors.FromFlatDataAndDimensions(positions, dims...),
		tensors.FromFlatDataAndDimensions(weights, dims...)}
}

// randomDocs draws documents of the given lengths, with prompts of the given lengths (0: none).
func randomDocs(rng *rand.Rand, vocab int, lengths, prompts []int) []packedDoc {
	docs := make([]packedDoc, len(lengths))
	for i, n := range lengths {
		docs[i].prompt = prompts[i]
		for range n {
			docs[i].tokens = append(docs[i].tokens, int32(rng.IntN(vocab)))
		}
	}
	return docs
}

// separateLoss returns, in the graph of ctx, the summed loss and count of each document computed
// on its own (a batch of one sequence of its length, unpacked) by lossOf.
func separateLoss(docs []packedDoc, g *graph.Graph, lossOf func(tokens, targets, weights *graph.Node) (sum, count *graph.Node)) (sum, count *graph.Node) {
	for _, d := range docs {
		n := len(d.tokens) - 1
		w := make([]float32, n)
		for i := range w {
			if i+1 >= d.prompt {
				w[i] = 1
			}
		}
		s, c := lossOf(graph.Const(g, [][]int32{d.tokens[:n]}), graph.Const(g, [][]int32{d.tokens[1:]}), graph.Const(g, [][]float32{w}))
		if sum == nil {
			sum, count = s, c
		} else {
			sum, count = graph.Add(sum, s), graph.Add(count, c)
		}
	}
	return sum, count
}

// TestPackedLossIsTheDocumentsLosses: a packed batch's loss sum and count (the Llama and the GPT
// with Packed; prompts that carry no loss, padding, documents of several lengths in a row) equal
// the sums of its documents' losses computed each on its own, unpacked, within 1e-5 relative in
// float32: with plain attention and loss, and with chunked attention (blocks that cross document
// boundaries) and a chunked loss. The count is exact.
func TestPackedLossIsTheDocumentsLosses(t *testing.T) {
	rng := rand.New(rand.NewPCG(31, 32))
	llama := tinyLlama(false)
	llama.SeqLen = 16
	gpt := models.GPTConfig{Hidden: 16, Layers: 2, HeadDim: 4, MLPFactor: 2, SeqLen: 16, Vocab: 40}
	lengths := [][]int{{7, 5}, {12, 4}, {17}}
	for _, c := range []struct {
		name    string
		prompts [][]int // per row, per document
		packed  func(ctx *context.Context, batch []*graph.Node) accum.Mean
		alone   func(ctx *context.Context, tokens, targets, weights *graph.Node) (sum, count *graph.Node)
	}{
		{"llama", [][]int{{3, 0}, {5, 2}, {0}},
			func(ctx *context.Context, batch []*graph.Node) accum.Mean {
				loss, _ := models.Llama{Config: llama, Packed: true}.Loss(ctx, batch)
				return loss
			},
			func(ctx *context.Context, tokens, targets, weights *graph.Node) (sum, count *graph.Node) {
				return models.Llama{Config: llama}.CrossEntropy(ctx, tokens, targets, weights)
			}},
		{"gpt", [][]int{{0, 0}, {0, 0}, {0}}, // the GPT's unpacked loss weighs every target
			func(ctx *context.Context, batch []*graph.Node) accum.Mean {
				loss, _ := models.GPT{Config: gpt, Packed: true}.Loss(ctx, batch)
				return loss
			},
			func(ctx *context.Context, tokens, targets, _ *graph.Node) (sum, count *graph.Node) {
				loss, _ := models.GPT{Config: gpt}.Loss(ctx, []*graph.Node{tokens, targets})
				return loss.Sum, loss.Count
			}},
	} {
		var rows [][]packedDoc
		var all []packedDoc
		for r, l := range lengths {
			docs := randomDocs(rng, 40, l, c.prompts[r])
			rows, all = append(rows, docs), append(all, docs...)
		}
		rows[2][0].tokens = rows[2][0].tokens[:17] // fills its row: no padding
		for _, chunked := range []bool{false, true} {
			name := c.name + " plain"
			if chunked {
				name = c.name + " chunked"
			}
			t.Run(name, func(t *testing.T) {
				ctx := context.New().Checked(false)
				exec, err := context.NewExec(testkit.Embedded(), ctx, func(ctx *context.Context, in []*graph.Node) []*graph.Node {
					if chunked {
						layers.SetAttention(ctx, layers.Attention{Chunked: true, Block: 5})
						layers.SetCrossEntropy(ctx, layers.CrossEntropy{Chunk: 7})
					}
					packed := c.packed(ctx, in)
					sum, count := separateLoss(all, in[0].Graph(), func(tokens, targets, weights *graph.Node) (*graph.Node, *graph.Node) {
						return c.alone(ctx, tokens, targets, weights)
					})
					return []*graph.Node{packed.Sum, packed.Count, sum, count}
				})
				if err != nil {
					t.Fatal(err)
				}
				defer exec.Finalize()
				batch := packedBatch(rows, 16)
				args := make([]any, len(batch))
				for i, b := range batch {
					args[i] = b
				}
				out, err := exec.Exec(args...)
				if err != nil {
					t.Fatal(err)
				}
				f := func(i int) float64 { return testkit.Floats(out[i])[0] }
				if rel := math.Abs(f(0)-f(2)) / math.Abs(f(2)); rel > 1e-5 || f(1) != f(3) {
					t.Errorf("packed: loss sum %.8g over %g targets; documents alone: %.8g over %g (relative %.2g)", f(0), f(1), f(2), f(3), rel)
				}
			})
		}
	}
}
