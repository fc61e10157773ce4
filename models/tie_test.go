package models_test

import (
	"fmt"
	"sort"
	"strings"
	"testing"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/gomlx/gomlx/pkg/ml/context"

	"github.com/onegpu/onegpu/analysis"
	"github.com/onegpu/onegpu/internal/blocks"
	"github.com/onegpu/onegpu/internal/testkit"
	"github.com/onegpu/onegpu/models"
	"github.com/onegpu/onegpu/remat"
)

// tieCase is one model and block kind whose rematerialization the XLA census checks: loss builds
// the model's loss with that kind rematerialized or not; recomputed is the number of matmuls the
// backward pass recomputes in a step: those of the rematerialized forward whose outputs the
// gradients need. A block's last projection is not among them (its gradients need its input and
// the cotangent, not its output: XLA drops its recomputation as dead code).
type tieCase struct {
	name       string
	inputs     []shapes.Shape
	loss       func(ctx *context.Context, inputs []*graph.Node, rematerialized bool) *graph.Node
	recomputed int
}

// tieCases lists every model and block kind. A new model's test file adds its rows in an init
// function (tieCases = append(tieCases, ...)), so that its blocks are held to the same census.
var tieCases = []tieCase{
	gptTieCase("GPT MLP", blocks.Spec{MLP: true}, 1),             // the input projection
	gptTieCase("GPT attention", blocks.Spec{Attention: true}, 3), // QKV, scores, weighted values
	gptTieCase("GPT block", blocks.Spec{Block: true}, 5),         // the MLP's two, then the attention's three
	classifierTieCase(), // both layers: the log-softmax's gradient needs the logits
}

// tieGPT is the tiny preset without dropout (the random state's ties are not what this checks),
// two layers, float32.
func tieGPT() models.GPTConfig {
	c := models.Presets["tiny"]
	c.Dropout = 0
	return c
}

const tieBatch = 2

func gptTieCase(name string, spec blocks.Spec, perLayer int) tieCase {
	c := tieGPT()
	tokens := shapes.Make(dtypes.Int32, tieBatch, c.SeqLen)
	return tieCase{name: name, inputs: []shapes.Shape{tokens, tokens}, recomputed: perLayer * c.Layers,
		loss: func(ctx *context.Context, in []*graph.Node, rematerialized bool) *graph.Node {
			m, err := models.NewGPT(c) // float32: no policy is set on the context
			if err != nil {
				panic(err)
			}
			if rematerialized {
				remat.SetBlocks(ctx, remat.With(remat.NothingSaveable), spec.Kinds()...) // as a run's Config.Remat does
			}
			loss, _ := m.Loss(ctx, in)
			return graph.Div(loss.Sum, loss.Count)
		}}
}

// classifierBatch is the tutorial's batch for the classifier.
const classifierBatch = 512

// classifierTieCase checkpoints the whole classifier (its two Dense layers), as one block.
func classifierTieCase() tieCase {
	c := models.TutorialClassifier
	c.Dropout = 0
	return tieCase{name: "MLP classifier", recomputed: 2,
		inputs: []shapes.Shape{shapes.Make(dtypes.Float32, classifierBatch, c.Inputs), shapes.Make(dtypes.Int32, classifierBatch)},
		loss: func(ctx *context.Context, in []*graph.Node, rematerialized bool) *graph.Node {
			m := models.Classifier{Config: c} // float32: no policy is set on the context
			logProbs := func(ctx *context.Context, in []*graph.Node) []*graph.Node {
				return []*graph.Node{m.LogProbs(ctx, in[0])}
			}
			var lp *graph.Node
			if rematerialized {
				lp = remat.With(remat.NothingSaveable).CheckpointCtx(ctx, logProbs, in[0])[0]
			} else {
				lp = logProbs(ctx, in[:1])[0]
			}
			picked := graph.ReduceSum(graph.Mul(lp, graph.OneHot(in[1], c.Classes, lp.DType())), -1)
			return graph.Neg(graph.ReduceAllMean(picked))
		}}
}

// TestRematTiesOnXLA compiles the gradient step of every model and block kind on XLA, with and
// without rematerialization, and counts the matmuls of the optimized program (fused ones
// included): the rematerialized step has exactly the recomputed matmuls more. Without
// remat's tie (the exact -0.0 computed from the cotangent that the recomputation's inputs get,
// see remat.Config.PreventCSE) XLA's common-subexpression elimination merges the recomputation
// back into the forward pass: the counts are then equal, the activations stay alive, and only XLA
// shows it (the embedded backend runs the recomputation either way).
func TestRematTiesOnXLA(t *testing.T) {
	backend := testkit.RequireXLA(t)
	for _, c := range tieCases {
		t.Run(c.name, func(t *testing.T) {
			var dots [2]int
			var temporary [2]int64
			for i, rematerialized := range []bool{false, true} {
				name := fmt.Sprintf("%s%s_remat_%v", testkit.CensusPrefix, strings.ReplaceAll(strings.ToLower(c.name), " ", "_"), rematerialized)
				p, err := analysis.ContextProgram(backend, context.New(), name, c.inputs, gradientStep(c, rematerialized))
				if err != nil {
					t.Fatal(err)
				}
				census, stats := testkit.CompiledCensus(t, p)
				p.Graph.Finalize()
				dots[i], temporary[i] = countOps(census, "dot"), stats.TemporaryBytes
				t.Logf("remat %-5v: %d dots (%s), %d fusions, %.1f KiB of temporaries", rematerialized, dots[i],
					opsOf(census, "dot"), countOps(census, "fusion"), float64(stats.TemporaryBytes)/1024)
			}
			if got := dots[1] - dots[0]; got != c.recomputed {
				t.Errorf("the rematerialized step has %d dots, %d more than without remat; want %d more (the recomputed forward's): "+
					"a missing tie lets XLA merge the recomputation into the forward pass", dots[1], got, c.recomputed)
			}
		})
	}
}

// gradientStep returns the step whose program the census counts: the loss and the gradients of
// every trainable variable.
func gradientStep(c tieCase, rematerialized bool) func(ctx *context.Context, in []*graph.Node) []*graph.Node {
	return func(ctx *context.Context, in []*graph.Node) []*graph.Node {
		loss := c.loss(ctx, in, rematerialized)
		var params []*graph.Node
		for v := range ctx.IterVariables() {
			if v.Trainable {
				params = append(params, v.ValueGraph(loss.Graph()))
			}
		}
		return append([]*graph.Node{loss}, graph.Gradient(loss, params...)...)
	}
}

// countOps counts the census's instructions of an opcode, whatever their types.
func countOps(c analysis.HLOCensus, opcode string) int {
	n := 0
	for k, v := range c.Ops {
		if strings.HasPrefix(k, opcode+" ") {
			n += v
		}
	}
	return n
}

// opsOf lists the census's keys of an opcode with their counts, for the log.
func opsOf(c analysis.HLOCensus, opcode string) string {
	var parts []string
	for k, v := range c.Ops {
		if strings.HasPrefix(k, opcode+" ") {
			parts = append(parts, fmt.Sprintf("%d× %s", v, strings.TrimPrefix(k, opcode+" ")))
		}
	}
	sort.Strings(parts)
	return strings.Join(parts, ", ")
}
