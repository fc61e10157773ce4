package mixed_test

import (
	"math"
	"strings"
	"testing"

	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/ml/context"
	"github.com/gomlx/gomlx/pkg/ml/train/optimizers"

	"github.com/onegpu/onegpu/internal/testkit"
	"github.com/onegpu/onegpu/internal/tutorialmlp"
	"github.com/onegpu/onegpu/mixed"
	"github.com/onegpu/onegpu/platform"
)

// TestFloat16OnEmbeddedBackend: float16 compute is a clear error on the embedded backend, both from
// Policy.Validate (before building anything) and, for code that does not check, while the train
// step is built: Exec returns an error and no variable changes.
func TestFloat16OnEmbeddedBackend(t *testing.T) {
	policy, err := mixed.ParsePolicy("p=f32,c=f16,o=f32")
	if err != nil {
		t.Fatal(err)
	}
	err = policy.Validate(embedded())
	if err == nil || !strings.Contains(err.Error(), "float16") || !strings.Contains(err.Error(), "bfloat16") {
		t.Errorf("Validate: %v; want an error that names float16 and suggests bfloat16", err)
	}

	ctx := context.New()
	for i, value := range tutorialmlp.InitialParams(1) {
		scope, name, _ := strings.Cut(tutorialmlp.ParamNames[i], "/")
		ctx.In(scope).VariableWithValue(name, value)
	}
	before := snapshot(t, ctx)
	opt := withLossScale(optimizers.Adam().Done(), mixed.NewDynamicLossScale())
	exec, err := context.NewExec(embedded(), ctx, func(ctx *context.Context, x, labels *graph.Node) *graph.Node {
		loss := mlpLoss(ctx, policy, x, labels)
		opt.UpdateGraph(ctx, x.Graph(), loss)
		return graph.Neg(loss)
	})
	if err != nil {
		t.Fatal(err)
	}
	defer exec.Finalize()
	x, y := tutorialmlp.RandomBatch(1, 8)
	_, err = exec.Exec(x, y)
	if err == nil || !strings.Contains(err.Error(), "float16") {
		t.Fatalf("Exec with float16 compute on the embedded backend: %v; want an error naming float16", err)
	}
	t.Logf("error: %.300s", err)
	for name, b := range before {
		if got := snapshot(t, ctx)[name]; string(got) != string(b) {
			t.Errorf("variable %s changed", name)
		}
	}
}

// TestFloat16OnXLA trains the tutorial MLP with float32 parameters, float16 compute and a dynamic
// loss scale on XLA. It needs a PJRT plugin: set ONEGPU_PJRT_PLUGIN=/abs/path/plugin.so.
func TestFloat16OnXLA(t *testing.T) {
	backend, err := platform.NewBackend("xla:" + testkit.XLAPlugin(t))
	if err != nil {
		t.Fatal(err)
	}
	defer backend.Finalize()
	policy := mixed.Policy{Param: f32, Compute: f16, Output: f32}
	if err := policy.Validate(backend); err != nil {
		t.Fatalf("Validate on %s: %v", backend.Name(), err)
	}
	ctx := context.New()
	opt := withLossScale(optimizers.Adam().LearningRate(3e-3).Done(), mixed.NewDynamicLossScale())
	exec, err := context.NewExec(backend, ctx, func(ctx *context.Context, x, labels *graph.Node) *graph.Node {
		loss := mlpLoss(ctx, policy, x, labels)
		opt.UpdateGraph(ctx, x.Graph(), loss)
		return graph.Neg(graph.Neg(loss))
	})
	if err != nil {
		t.Fatal(err)
	}
	defer exec.Finalize()
	x, y := tutorialmlp.RandomBatch(1, tutorialmlp.Batch)
	var first, last float64
	for i := range 20 {
		out, err := exec.Exec(x, y)
		if err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		last = flatFloat64(out[0])[0]
		if i == 0 {
			first = last
		}
	}
	stats, err := opt.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s on %s: loss %.4f -> %.4f, %+v", policy, backend.Name(), first, last, stats)
	if math.IsNaN(last) || !(last < first) || stats.LossScale < 1 {
		t.Errorf("float16 training did not progress: loss %.4f -> %.4f, %+v", first, last, stats)
	}
}
