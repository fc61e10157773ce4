package remat_test

import (
	"strings"
	"testing"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/gomlx/gomlx/pkg/ml/context"
	"github.com/gomlx/gomlx/pkg/ml/train"

	"github.com/onegpu/onegpu/internal/blocks"
	"github.com/onegpu/onegpu/internal/panics"
	"github.com/onegpu/onegpu/internal/testkit"
	"github.com/onegpu/onegpu/remat"
)

// tiny is a two-block model small enough for exact comparisons in milliseconds.
var tiny = blocks.Config{Batch: 2, Seq: 8, Width: 16, Heads: 2, Blocks: 2, Compute: dtypes.Float32}

// ctxModel is a loss built from context variables.
type ctxModel func(ctx *context.Context, x *graph.Node) *graph.Node

// gradientsFrom returns the loss and every trainable variable's gradient of model on x, starting
// from a copy of base (same variables, same random number generator state).
func gradientsFrom(t *testing.T, base *context.Context, model ctxModel, x *tensors.Tensor) []*tensors.Tensor {
	t.Helper()
	ctx, err := base.Clone()
	if err != nil {
		t.Fatal(err)
	}
	exec, err := context.NewExec(embedded(), ctx.Checked(false), func(ctx *context.Context, x *graph.Node) []*graph.Node {
		ctx.SetTraining(x.Graph(), true)
		loss := model(ctx, x)
		return append([]*graph.Node{loss}, ctx.BuildTrainableVariablesGradientsGraph(loss)...)
	})
	if err != nil {
		t.Fatal(err)
	}
	defer exec.Finalize()
	outs, err := exec.Exec(x)
	if err != nil {
		t.Fatal(err)
	}
	return outs
}

// initialized returns a context whose variables (and RNG state) model has created and initialized.
func initialized(t *testing.T, model ctxModel, x *tensors.Tensor) *context.Context {
	t.Helper()
	ctx := context.New()
	ctx.SetParam(context.ParamInitialSeed, int64(42))
	gradientsFrom(t, ctx, model, x) // on a clone: the variables are created there...
	ctx = ctx.Checked(false)
	exec, err := context.NewExec(embedded(), ctx, func(ctx *context.Context, x *graph.Node) *graph.Node {
		ctx.SetTraining(x.Graph(), true)
		return model(ctx, x)
	})
	if err != nil {
		t.Fatal(err)
	}
	defer exec.Finalize()
	if _, err := exec.Exec(x); err != nil { // ... and here, in the context the tests clone
		t.Fatal(err)
	}
	return ctx
}

func stack(c blocks.Config, spec string, rc remat.Config) ctxModel {
	s, err := blocks.ParseSpec(spec)
	if err != nil {
		panic(err)
	}
	return func(ctx *context.Context, x *graph.Node) *graph.Node { return blocks.Loss(ctx, x, c, s, rc) }
}

// TestCheckpointCtxBitIdentical: the loss and every variable's gradient of checkpointed blocks
// equal those without checkpoint, bit for bit, for each spec and policy; with dropout (same
// masks), with float32 parameters and bfloat16 arithmetic, and with parameters shared by blocks.
func TestCheckpointCtxBitIdentical(t *testing.T) {
	dropout := tiny
	dropout.Dropout = 0.25
	mixed := tiny
	mixed.Compute = dtypes.BFloat16
	mixedDropout := mixed
	mixedDropout.Dropout = 0.25
	shared := func(spec string, rc remat.Config) ctxModel {
		s, _ := blocks.ParseSpec(spec)
		return func(ctx *context.Context, x *graph.Node) *graph.Node {
			h := x
			for range 3 { // the same block, three times
				h = blocks.Block(ctx.In("shared").Checked(false), h, tiny, s, rc)
			}
			return graph.ReduceAllMean(graph.Square(h))
		}
	}
	policies := []remat.Policy{remat.NothingSaveable, remat.DotsWithNoBatchDimsSaveable, remat.DotsSaveable,
		remat.SaveOnlyTheseNames("attn_scores", "mlp_in"), remat.EverythingSaveable}
	for _, c := range []struct {
		name  string
		model func(spec string, rc remat.Config) ctxModel
		specs []string
	}{
		{"float32", func(spec string, rc remat.Config) ctxModel { return stack(tiny, spec, rc) }, []string{"mlp", "attn", "mlp,attn", "block"}},
		{"dropout", func(spec string, rc remat.Config) ctxModel { return stack(dropout, spec, rc) }, []string{"mlp,attn", "block"}},
		{"bfloat16 compute", func(spec string, rc remat.Config) ctxModel { return stack(mixed, spec, rc) }, []string{"mlp,attn", "block"}},
		{"bfloat16 compute with dropout", func(spec string, rc remat.Config) ctxModel { return stack(mixedDropout, spec, rc) }, []string{"block"}},
		{"shared parameters", shared, []string{"mlp,attn", "block"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			x := blocks.RandomInput(tiny, 7)
			base := initialized(t, c.model("none", remat.Config{}), x)
			want := gradientsFrom(t, base, c.model("none", remat.Config{}), x)
			for _, spec := range c.specs {
				for _, policy := range policies {
					t.Run(spec+"/"+policy.String(), func(t *testing.T) {
						testkit.AssertBitIdentical(t, gradientsFrom(t, base, c.model(spec, remat.With(policy)), x), want)
					})
				}
			}
			t.Run("prevent_cse=false", func(t *testing.T) {
				testkit.AssertBitIdentical(t, gradientsFrom(t, base, c.model(c.specs[0], remat.Config{}.PreventCSE(false)), x), want)
			})
		})
	}
}

// TestCheckpointCtxRestoresGraphParams: a function that adds a regularization term with
// train.AddLoss adds it once, although it runs twice.
func TestCheckpointCtxRestoresGraphParams(t *testing.T) {
	x := blocks.RandomInput(tiny, 8)
	model := func(checkpoint bool) ctxModel {
		return func(ctx *context.Context, x *graph.Node) *graph.Node {
			fn := func(ctx *context.Context, in []*graph.Node) []*graph.Node {
				y := blocks.MLP(ctx, in[0], 0)
				train.AddLoss(ctx, graph.MulScalar(graph.ReduceAllMean(graph.Square(y)), 0.5))
				return []*graph.Node{y}
			}
			var y *graph.Node
			if checkpoint {
				y = remat.CheckpointCtx(ctx.In("mlp"), fn, x)[0]
			} else {
				y = fn(ctx.In("mlp"), []*graph.Node{x})[0]
			}
			loss := graph.Add(graph.ReduceAllMean(graph.Abs(y)), train.GetLosses(ctx, x.Graph()))
			before := train.GetLosses(ctx, x.Graph())
			graph.Gradient(loss, x) // recomputes fn, which calls AddLoss again
			if after := train.GetLosses(ctx, x.Graph()); after != before {
				t.Errorf("the recomputation changed the graph's losses")
			}
			return loss
		}
	}
	base := initialized(t, model(false), x)
	testkit.AssertBitIdentical(t, gradientsFrom(t, base, model(true), x), gradientsFrom(t, base, model(false), x))
}

// TestCheckpointClosureOverContext: Checkpoint (without Ctx) of a function that reads context
// variables through a context it closes over gives the variables their gradients; if the function
// draws random numbers that way, Checkpoint refuses and points to CheckpointCtx.
func TestCheckpointClosureOverContext(t *testing.T) {
	x := blocks.RandomInput(tiny, 10)
	model := func(checkpoint bool) ctxModel {
		return func(ctx *context.Context, x *graph.Node) *graph.Node {
			fn := func(in []*graph.Node) []*graph.Node { return []*graph.Node{blocks.MLP(ctx.In("mlp"), in[0], 0)} }
			var y *graph.Node
			if checkpoint {
				y = remat.Checkpoint(fn, x)[0]
			} else {
				y = fn([]*graph.Node{x})[0]
			}
			return graph.ReduceAllMean(graph.Square(y))
		}
	}
	base := initialized(t, model(false), x)
	testkit.AssertBitIdentical(t, gradientsFrom(t, base, model(true), x), gradientsFrom(t, base, model(false), x))

	ctx := context.New()
	g := graph.NewGraph(embedded(), "dropout through a closure")
	defer g.Finalize()
	ctx.SetTraining(g, true)
	input := graph.Parameter(g, "x", tiny.InputShape())
	err := panics.Catch(func() {
		remat.Checkpoint(func(in []*graph.Node) []*graph.Node {
			return []*graph.Node{blocks.MLP(ctx.In("mlp"), in[0], 0.5)}
		}, input)
	})
	if err == nil || !strings.Contains(err.Error(), "use CheckpointCtx") {
		t.Errorf("got %v, want a panic that points to CheckpointCtx", err)
	}
}
