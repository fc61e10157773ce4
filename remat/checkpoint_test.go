package remat_test

import (
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/gomlx/gomlx/pkg/core/tensors"

	"github.com/onegpu/onegpu/internal/panics"
	"github.com/onegpu/onegpu/internal/testkit"
	"github.com/onegpu/onegpu/remat"
)

// mlp is a two-layer block with a residual connection and an auxiliary scalar output: inputs x,
// w1, b1, w2, b2.
func mlp(in []*graph.Node) []*graph.Node {
	outs, _ := mlpWithTags(in)
	return outs
}

func mlpArgs(seed uint64, batch, width, hidden int) []*tensors.Tensor {
	rng := rand.New(rand.NewPCG(seed, 1))
	return []*tensors.Tensor{
		randomTensor(rng, 1, batch, width),
		randomTensor(rng, 0.3, width, hidden), randomTensor(rng, 0.1, hidden),
		randomTensor(rng, 0.3, hidden, width), randomTensor(rng, 0.1, width),
	}
}

// lossAndGradients ends a model: a loss mixing both of the block's outputs nonlinearly, and its
// gradients with respect to every input.
func lossAndGradients(outs []*graph.Node, wrt []*graph.Node) []*graph.Node {
	loss := graph.Add(graph.ReduceAllMean(graph.Square(graph.Sin(outs[0]))), graph.MulScalar(outs[1], 0.1))
	return append([]*graph.Node{loss}, graph.Gradient(loss, wrt...)...)
}

func TestCheckpointMLPBitIdentical(t *testing.T) {
	args := mlpArgs(1, 8, 16, 32)
	plain := execute(t, func(in []*graph.Node) []*graph.Node { return lossAndGradients(mlp(in), in) }, args...)
	for _, c := range []struct {
		name string
		cfg  remat.Config
	}{
		{"nothing_saveable", remat.Config{}},
		{"dots_saveable", remat.With(remat.DotsSaveable)},
		{"save hidden", remat.With(remat.SaveOnlyTheseNames("hidden"))},
		{"everything_saveable", remat.With(remat.EverythingSaveable)},
		{"cse allowed", remat.Config{}.PreventCSE(false)},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := execute(t, func(in []*graph.Node) []*graph.Node {
				return lossAndGradients(c.cfg.Checkpoint(mlp, in...), in)
			}, args...)
			testkit.AssertBitIdentical(t, got, plain)
		})
	}
}

// TestCheckpointNestedSharedBitIdentical: two blocks share their weights; the second holds a
// nested checkpoint and takes the first block's auxiliary output as an extra input.
func TestCheckpointNestedSharedBitIdentical(t *testing.T) {
	args := mlpArgs(3, 8, 16, 32)
	model := func(checkpoint func(fn func([]*graph.Node) []*graph.Node, inputs ...*graph.Node) []*graph.Node) func([]*graph.Node) []*graph.Node {
		return func(in []*graph.Node) []*graph.Node {
			first := checkpoint(mlp, in...)
			second := checkpoint(func(in2 []*graph.Node) []*graph.Node {
				inner := checkpoint(mlp, in2[:5]...)
				return []*graph.Node{graph.Tanh(inner[0]), graph.Add(inner[1], in2[5])}
			}, append(append([]*graph.Node{first[0]}, in[1:]...), first[1])...)
			return lossAndGradients(second, in)
		}
	}
	plain := execute(t, model(func(fn func([]*graph.Node) []*graph.Node, inputs ...*graph.Node) []*graph.Node { return fn(inputs) }), args...)
	for _, policy := range []remat.Policy{remat.NothingSaveable, remat.DotsSaveable, remat.SaveOnlyTheseNames("hidden")} {
		t.Run(policy.String(), func(t *testing.T) {
			got := execute(t, model(remat.With(policy).Checkpoint), args...)
			testkit.AssertBitIdentical(t, got, plain)
		})
	}
}

// TestCheckpointPassesThroughNonFloats: integer inputs reach fn unchanged, integer outputs and
// outputs that are inputs come back as they are, and gradients are unchanged.
func TestCheckpointPassesThroughNonFloats(t *testing.T) {
	args := mlpArgs(4, 6, 8, 8)
	indices := tensors.FromValue([]int32{2, 0, 1, 5, 3, 4})
	block := func(in []*graph.Node) []*graph.Node {
		x, w, order := in[0], in[1], in[2]
		h := graph.Tanh(graph.Dot(graph.Gather(x, graph.InsertAxes(order, -1)), w))
		return []*graph.Node{h, graph.ArgMax(h, -1), x, order}
	}
	model := func(checkpoint bool) func([]*graph.Node) []*graph.Node {
		return func(in []*graph.Node) []*graph.Node {
			blockIn := []*graph.Node{in[0], in[1], in[5]}
			var outs []*graph.Node
			if checkpoint {
				outs = remat.Checkpoint(block, blockIn...)
				if outs[2] != in[0] || outs[3] != in[5] {
					t.Errorf("outputs that are inputs were not returned as they are")
				}
			} else {
				outs = block(blockIn)
			}
			loss := graph.Add(graph.ReduceAllSum(graph.Square(outs[0])), graph.ReduceAllSum(graph.Sin(outs[2])))
			grads := graph.Gradient(loss, in[0], in[1])
			return []*graph.Node{loss, grads[0], grads[1], graph.ConvertDType(outs[1], dtypes.Float32)}
		}
	}
	args = append(args[:2], args[2], args[3], args[4], indices)
	testkit.AssertBitIdentical(t, execute(t, model(true), args...), execute(t, model(false), args...))
}

// TestCheckpointCapturedValues: values the function closes over (weights, a value computed
// before the call) get the same gradients as without checkpoint, also when two blocks close over
// the same weights.
func TestCheckpointCapturedValues(t *testing.T) {
	args := mlpArgs(5, 8, 16, 32)
	model := func(checkpoint bool) func([]*graph.Node) []*graph.Node {
		return func(in []*graph.Node) []*graph.Node {
			x, w1, b1, w2, b2 := in[0], in[1], in[2], in[3], in[4]
			scaledB2 := graph.MulScalar(graph.Sin(b2), 2) // computed outside, closed over
			block := func(xs []*graph.Node) []*graph.Node {
				outs := mlp([]*graph.Node{xs[0], w1, b1, w2, scaledB2})
				return []*graph.Node{outs[0], graph.Add(outs[1], xs[1])}
			}
			outs := []*graph.Node{x, graph.ScalarZero(x.Graph(), dtypes.Float32)}
			for range 2 {
				if checkpoint {
					outs = remat.Checkpoint(block, outs...)
				} else {
					outs = block(outs)
				}
			}
			return lossAndGradients(outs, in)
		}
	}
	testkit.AssertBitIdentical(t, execute(t, model(true), args...), execute(t, model(false), args...))
}

// TestCheckpointCapturedChainPanics: closing over a value and another computed from it would
// count the path between them twice; Checkpoint refuses with a message that names both.
func TestCheckpointCapturedChainPanics(t *testing.T) {
	g := graph.NewGraph(embedded(), "chain")
	defer g.Finalize()
	x := graph.Parameter(g, "x", shapes.Make(dtypes.Float32, 2, 3))
	w := graph.Parameter(g, "w", shapes.Make(dtypes.Float32, 3, 3))
	w2 := graph.MulScalar(w, 2)
	err := panics.Catch(func() {
		remat.Checkpoint(func(in []*graph.Node) []*graph.Node {
			return []*graph.Node{graph.Add(graph.Dot(in[0], w), graph.Dot(in[0], w2))}
		}, x)
	})
	if err == nil || !strings.Contains(err.Error(), `parameter "w"`) || !strings.Contains(err.Error(), "pass them as inputs") {
		t.Fatalf("got error %v, want one naming parameter \"w\" and saying to pass them as inputs", err)
	}
}

// TestCheckpointSeveralGradients: a graph differentiated twice, for two losses, gets the right
// gradients each time (each backward pass recomputes with its own cotangents).
func TestCheckpointSeveralGradients(t *testing.T) {
	args := mlpArgs(6, 8, 16, 32)
	model := func(checkpoint bool) func([]*graph.Node) []*graph.Node {
		return func(in []*graph.Node) []*graph.Node {
			var outs []*graph.Node
			if checkpoint {
				outs = remat.Checkpoint(mlp, in...)
			} else {
				outs = mlp(in)
			}
			first := graph.ReduceAllSum(graph.Square(outs[0]))
			second := graph.MulScalar(outs[1], 3)                                             // reaches the second output only
			third := graph.Add(graph.ReduceAllSum(graph.Sin(outs[0])), graph.Square(outs[1])) // both, as the first two together
			res := []*graph.Node{first, second, third}
			for _, loss := range []*graph.Node{first, second, graph.Add(first, second), third} {
				res = append(res, graph.Gradient(loss, in...)...)
			}
			return res
		}
	}
	testkit.AssertBitIdentical(t, execute(t, model(true), args...), execute(t, model(false), args...))
}

// TestCheckpointMisusePanics: misuse is reported with messages that say what is wrong.
func TestCheckpointMisusePanics(t *testing.T) {
	g := graph.NewGraph(embedded(), "misuse")
	defer g.Finalize()
	x := graph.Parameter(g, "x", shapes.Make(dtypes.Float32, 4))
	calls := 0
	for _, c := range []struct {
		name, want string
		build      func()
	}{
		{"no inputs", "needs at least one input", func() {
			remat.Checkpoint(func([]*graph.Node) []*graph.Node { return nil })
		}},
		{"nil output", "nil output #1", func() {
			remat.Checkpoint(func(in []*graph.Node) []*graph.Node { return []*graph.Node{in[0], nil} }, x)
		}},
		{"different recomputation", "must build the same graph", func() {
			y := remat.Checkpoint(func(in []*graph.Node) []*graph.Node {
				calls++
				if calls > 1 {
					return []*graph.Node{graph.Sin(in[0]), in[0]}
				}
				return []*graph.Node{graph.Sin(in[0])}
			}, x)[0]
			graph.Gradient(graph.ReduceAllSum(y), x)
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := panics.Catch(c.build)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("got %v, want a panic containing %q", err, c.want)
			}
		})
	}
}
