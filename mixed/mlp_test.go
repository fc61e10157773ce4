package mixed_test

import (
	"math"
	"testing"
	"time"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/gomlx/gomlx/pkg/ml/context"
	"github.com/gomlx/gomlx/pkg/ml/train/optimizers"

	"github.com/onegpu/onegpu/analysis"
	"github.com/onegpu/onegpu/audit"
	"github.com/onegpu/onegpu/internal/tutorialmlp"
	"github.com/onegpu/onegpu/mixed"
)

// mlpLoss builds the tutorial MLP's mean cross-entropy under policy, with parameters from ctx, as
// internal/tutorialmlp writes it: its own casts, LayerNorm and log-softmax.
func mlpLoss(ctx *context.Context, policy mixed.Policy, x, labels *graph.Node) *graph.Node {
	p := tutorialmlp.ContextParams(ctx, x.Graph(), 1)
	logp := tutorialmlp.LogProbs(p, policy.CastToCompute(x), policy.Compute, policy.Compute)
	return tutorialmlp.Loss(policy.CastToOutput(logp), labels)
}

// islandsMLPLoss is the same model and loss written with this package: the policy's casts,
// Normalize for the LayerNorm and SoftmaxCrossEntropyMean for the loss, whose gradients keep no
// float32 copy of an activation.
func islandsMLPLoss(ctx *context.Context, policy mixed.Policy, x, labels *graph.Node) *graph.Node {
	p := tutorialmlp.ContextParams(ctx, x.Graph(), 1)
	row := func(v *graph.Node) *graph.Node { return graph.InsertAxes(policy.CastToCompute(v), 0) }
	dense := func(in, kernel, bias *graph.Node) *graph.Node {
		return graph.Add(graph.Dot(in, policy.CastToCompute(kernel)), row(bias))
	}
	h := dense(policy.CastToCompute(x), p.Kernel1, p.Bias1)
	h = graph.Add(graph.Mul(mixed.Normalize(h, 1e-6), row(p.Scale)), row(p.Offset))
	h = graph.Mul(h, graph.Logistic(h)) // SiLU
	return mixed.SoftmaxCrossEntropyMean(dense(h, p.Kernel2, p.Bias2), labels, nil, policy.Output)
}

// mlpModels are the two writings of the tutorial MLP the tests and benchmarks compare.
var mlpModels = []struct {
	name string
	loss func(ctx *context.Context, policy mixed.Policy, x, labels *graph.Node) *graph.Node
}{{"tutorialmlp", mlpLoss}, {"islands", islandsMLPLoss}}

// trainMLP trains the tutorial MLP (batch 512) for steps steps with Adam under policy, wrapped
// with a dynamic loss scale, cycling over 4 synthetic batches, and returns the float32 loss of
// the trained parameters on a held-out batch, and that loss before training.
func trainMLP(t *testing.T, model func(*context.Context, mixed.Policy, *graph.Node, *graph.Node) *graph.Node,
	policy mixed.Policy, steps int) (initial, final float64) {
	ctx := context.New()
	opt := withLossScale(optimizers.Adam().LearningRate(3e-3).Done(), mixed.NewDynamicLossScale())
	step, err := context.NewExec(embedded(), ctx, func(ctx *context.Context, x, labels *graph.Node) *graph.Node {
		loss := model(ctx, policy, x, labels)
		opt.UpdateGraph(ctx, x.Graph(), loss)
		return graph.Neg(graph.Neg(loss))
	})
	if err != nil {
		t.Fatal(err)
	}
	defer step.Finalize()
	full := mixed.Policy{Param: f32, Compute: f32, Output: f32}
	eval, err := context.NewExec(embedded(), ctx, func(ctx *context.Context, x, labels *graph.Node) *graph.Node {
		return mlpLoss(ctx.Checked(false), full, x, labels)
	})
	if err != nil {
		t.Fatal(err)
	}
	defer eval.Finalize()
	evalX, evalY := tutorialmlp.RandomBatch(99, tutorialmlp.Batch)
	evalLoss := func() float64 {
		out, err := eval.Exec(evalX, evalY)
		if err != nil {
			t.Fatal(err)
		}
		return flatFloat64(out[0])[0]
	}
	var xs, ys []*tensors.Tensor
	for i := range 4 {
		x, y := tutorialmlp.RandomBatch(uint64(10+i), tutorialmlp.Batch)
		xs, ys = append(xs, x), append(ys, y)
	}
	initial = evalLoss()
	start := time.Now()
	for i := range steps {
		if _, err := step.Exec(xs[i%4], ys[i%4]); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("%s: %d steps in %s", policy, steps, time.Since(start).Round(time.Millisecond))
	if s, err := opt.Stats(ctx); err != nil || s.SkippedSteps != 0 {
		t.Errorf("%s: stats %+v, %v: no step should be skipped", policy, s, err)
	}
	return initial, evalLoss()
}

// TestMixedMLPTrainsLikeFloat32: with float32 parameters, bfloat16 compute and float32 output
// (and a dynamic loss scale), the tutorial MLP trained with Adam on its synthetic task reaches,
// after the same number of steps, a held-out loss within 2% of the float32 run's; both as
// internal/tutorialmlp writes it and written with this package's islands.
func TestMixedMLPTrainsLikeFloat32(t *testing.T) {
	steps := 40
	if testing.Short() {
		steps = 20
	}
	mixedPolicy, _ := mixed.ParsePolicy("params=float32,compute=bfloat16,output=float32")
	for _, model := range mlpModels {
		t.Run(model.name, func(t *testing.T) {
			initial, f32Loss := trainMLP(t, model.loss, mixed.Policy{Param: f32, Compute: f32, Output: f32}, steps)
			_, mixedLoss := trainMLP(t, model.loss, mixedPolicy, steps)
			rel := math.Abs(mixedLoss-f32Loss) / f32Loss
			t.Logf("held-out loss: initial %.4f, after %d steps float32 %.4f, mixed %.4f (%.2f%% apart)",
				initial, steps, f32Loss, mixedLoss, 100*rel)
			if !(f32Loss < 0.9*initial) {
				t.Errorf("float32 run did not learn: loss %.4f from %.4f", f32Loss, initial)
			}
			if !(rel <= 0.02) {
				t.Errorf("mixed-precision loss %.4f is %.2f%% from float32's %.4f; want <= 2%%", mixedLoss, 100*rel, f32Loss)
			}
		})
	}
}

// TestAuditMixedMLPTrainStep: the whole mixed-precision train step of the tutorial MLP (forward,
// backward, loss scaling, finiteness check, Adam, atomic skip) has no 16-bit reduction according
// to the dtype audit (package audit); a loss averaged naively in bfloat16 is reported.
func TestAuditMixedMLPTrainStep(t *testing.T) {
	policy := mixed.Policy{Param: f32, Compute: bf16, Output: f32}
	for _, naive := range []bool{false, true} {
		for _, model := range mlpModels {
			if naive && model.name != mlpModels[0].name {
				continue
			}
			g := graph.NewGraph(embedded(), "mixed_mlp_step")
			x := graph.Parameter(g, "x", shapes.Make(f32, tutorialmlp.Batch, tutorialmlp.Inputs))
			labels := graph.Parameter(g, "labels", shapes.Make(labelsDType, tutorialmlp.Batch))
			ctx := context.New()
			loss := model.loss(ctx, policy, x, labels)
			if naive {
				p := tutorialmlp.ContextParams(ctx, g, 1)
				logp := tutorialmlp.LogProbs(p, x, bf16, bf16)
				loss = graph.ConvertDType(tutorialmlp.Loss(graph.ConvertDType(logp, bf16), labels), f32)
			}
			opt := withLossScale(optimizers.Adam().Done(), mixed.NewDynamicLossScale())
			opt.UpdateGraph(ctx, g, loss)
			outputs := []*graph.Node{loss}
			for v := range ctx.IterVariables() {
				if v.ChangedInGraph(g) {
					outputs = append(outputs, v.ValueGraph(g))
				}
			}
			findings := audit.Graph(g, outputs)
			n := audit.CountFindings(findings, audit.Reduction16)
			t.Logf("%s naive=%v: %d findings, %d 16-bit reductions, %d outputs", model.name, naive, len(findings), n, len(outputs))
			for _, f := range findings {
				t.Logf("  %s", f)
			}
			if !naive && n != 0 {
				t.Errorf("the mixed train step has %d 16-bit reductions, want 0", n)
			}
			if naive && n == 0 {
				t.Errorf("a bfloat16 mean of the loss was not reported")
			}
			g.Finalize()
		}
	}
}

var labelsDType = tutorialmlpLabelsDType()

func tutorialmlpLabelsDType() dtypes.DType {
	_, y := tutorialmlp.RandomBatch(0, 1)
	return y.DType()
}

// TestIslandsHalveActivations: in the memory analysis's simulation of the embedded backend, the activations
// alive at the peak of the tutorial MLP's train step written with this package's islands, with
// the batch handed over in the compute dtype, are at most 0.55 of float32's with bfloat16
// compute: the islands' gradients keep no float32 copy of an activation. (Deterministic: nothing
// runs. Timings and measured heaps are in BenchmarkMLPStep.)
func TestIslandsHalveActivations(t *testing.T) {
	activations := func(spec string) int64 {
		policy, err := mixed.ParsePolicy(spec)
		if err != nil {
			t.Fatal(err)
		}
		inputs := []shapes.Shape{
			shapes.Make(policy.Compute, tutorialmlp.Batch, tutorialmlp.Inputs),
			shapes.Make(labelsDType, tutorialmlp.Batch),
		}
		opt := withLossScale(optimizers.Adam().Done(), mixed.NewDynamicLossScale())
		p, err := analysis.ContextProgram(embedded(), context.New(), "islands_mlp", inputs,
			func(ctx *context.Context, in []*graph.Node) []*graph.Node {
				loss := islandsMLPLoss(ctx, policy, in[0], in[1])
				opt.UpdateGraph(ctx, loss.Graph(), loss)
				return []*graph.Node{loss}
			})
		if err != nil {
			t.Fatal(err)
		}
		defer p.Graph.Finalize()
		m := analysis.Analyze(p)
		for _, tensor := range m.AtPeak {
			if tensor.Kind == analysis.Activations && tensor.Node.DType() == f32 && policy.Compute != f32 {
				t.Errorf("%s: float32 activation %s %s alive at the peak", spec, tensor.Label(), tensor.Node.Shape())
			}
		}
		return m.Breakdown[analysis.Activations]
	}
	full, half := activations("float32"), activations("p=f32,c=bf16,o=f32")
	ratio := float64(half) / float64(full)
	t.Logf("activations at the simulated peak: float32 %d bytes, bfloat16 compute %d bytes (%.3fx)", full, half, ratio)
	if !(ratio <= 0.55) {
		t.Errorf("bfloat16 compute keeps %.3fx the activations of float32, want <= 0.55x", ratio)
	}
}
