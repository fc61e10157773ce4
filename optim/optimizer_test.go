package optim_test

import (
	"math"
	"strings"
	"testing"

	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/gomlx/gomlx/pkg/ml/context"
	"github.com/gomlx/gomlx/pkg/ml/context/initializers"
	"github.com/gomlx/gomlx/pkg/ml/train/optimizers"

	"github.com/onegpu/onegpu/accum"
	"github.com/onegpu/onegpu/internal/testkit"
	"github.com/onegpu/onegpu/optim"
)

// adamWReference is optax.adamw in float64: the moments of the gradient, debiased, and the weight
// decay added to the update outside them.
func adamWReference(w []float64, grad func(step int) []float64, steps int, lr, wd float64) []float64 {
	const b1, b2, eps = optim.AdamBeta1, optim.AdamBeta2, optim.AdamEpsilon
	m, v := make([]float64, len(w)), make([]float64, len(w))
	w = append([]float64(nil), w...)
	for t := 1; t <= steps; t++ {
		g := grad(t - 1)
		for i := range w {
			m[i] = b1*m[i] + (1-b1)*g[i]
			v[i] = b2*v[i] + (1-b2)*g[i]*g[i]
			mHat, vHat := m[i]/(1-math.Pow(b1, float64(t))), v[i]/(1-math.Pow(b2, float64(t)))
			w[i] -= lr * (mHat/(math.Sqrt(vHat)+eps) + wd*w[i])
		}
	}
	return w
}

// TestAdamWDecaysDecoupled: optim.AdamW's updates are optax.adamw's in float64 (within float32
// rounding) for a loss whose gradient is a fixed vector, and for a zero gradient the parameters
// only decay, by lr·wd·w per step: a weight decay added to the gradient (L2, coupled) would be
// normalized by Adam's moments and move each parameter by about lr instead.
func TestAdamWDecaysDecoupled(t *testing.T) {
	const lr, wd, steps = 1e-2, 0.1, 5
	start := []float64{0.5, -1.5, 2, 0.25}
	for _, tc := range []struct {
		name  string
		slope []float64
	}{{"fixed gradient", []float64{1, -2, 0.5, 3}}, {"zero gradient", []float64{0, 0, 0, 0}}} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.New()
			init := make([]float32, len(start))
			for i, x := range start {
				init[i] = float32(x)
			}
			opt := optim.AdamW().WeightDecay(wd).LearningRate(lr).Done()
			chain, err := optim.NewChain(optim.Apply(opt))
			if err != nil {
				t.Fatal(err)
			}
			slope := make([]float32, len(tc.slope))
			for i, s := range tc.slope {
				slope[i] = float32(s)
			}
			loss := func(ctx *context.Context, in []*graph.Node) (accum.Mean, []accum.Mean) {
				w := ctx.WithInitializer(initializers.Zero).VariableWithValue("w", init).ValueGraph(in[0].Graph())
				return accum.Mean{Sum: graph.ReduceAllSum(graph.Mul(w, in[0])), Count: graph.ScalarOne(in[0].Graph(), w.DType())}, nil
			}
			exec, err := context.NewExec(testkit.Embedded(), ctx, chain.StepFn(loss))
			if err != nil {
				t.Fatal(err)
			}
			defer exec.Finalize()
			for range steps {
				if _, err := exec.Exec(tensors.FromValue(slope)); err != nil {
					t.Fatal(err)
				}
			}
			got := tensors.MustCopyFlatData[float32](ctx.InspectVariable(context.RootScope, "w").MustValue())
			want := adamWReference(start, func(int) []float64 { return tc.slope }, steps, lr, wd)
			for i := range want {
				if math.Abs(float64(got[i])-want[i]) > 1e-6*math.Max(1, math.Abs(want[i])) {
					t.Errorf("w[%d] = %.8f, optax.adamw %.8f", i, got[i], want[i])
				}
			}
			if optimizers.GetGlobalStep(ctx) != steps {
				t.Errorf("global step %d, want %d", optimizers.GetGlobalStep(ctx), steps)
			}
		})
	}
}

// TestOptimizersByName: the registered names build optimizers with stable descriptions (what
// checkpoints record), settings an optimizer has no use for are refused, and an unknown name is
// an error listing the names.
func TestOptimizersByName(t *testing.T) {
	for name, want := range map[string]string{
		"adam":     "adam(b1=0.9, b2=0.999, eps=1e-08)",
		"adamw":    "adamw(b1=0.9, b2=0.999, eps=1e-08, weight_decay=0.0001)",
		"adam8bit": "adam8bit(b1=0.9, b2=0.999, eps=1e-08)",
	} {
		o, err := optim.ByName(name, optim.Settings{})
		if err != nil || o.String() != want {
			t.Errorf("ByName(%q) = %v, %v; want %s", name, o, err, want)
		}
	}
	if o, err := optim.ByName("adafactor", optim.Settings{}); err != nil || o.String() != "adafactor" {
		t.Errorf("ByName(adafactor) = %v, %v", o, err)
	}
	if o, err := optim.ByName("adamw", optim.Settings{WeightDecay: 0.05}); err != nil || !strings.Contains(o.String(), "weight_decay=0.05") {
		t.Errorf("adamw with weight decay 0.05: %v, %v", o, err)
	}
	if _, err := optim.ByName("adam8bit", optim.Settings{WeightDecay: 0.05}); err == nil || !strings.Contains(err.Error(), "no weight decay") {
		t.Errorf("adam8bit with a weight decay: %v, want an error", err)
	}
	if _, err := optim.ByName("adamw", optim.Settings{WeightDecay: math.NaN()}); err == nil {
		t.Error("adamw with a NaN weight decay: no error")
	}
	if _, err := optim.ByName("adma", optim.Settings{}); err == nil || !strings.Contains(err.Error(), "adam, adam8bit, adamw") {
		t.Errorf("ByName(adma): %v, want an error listing the names", err)
	}
	sgd := optim.Named("sgd", optimizers.StochasticGradientDescent())
	if sgd.String() != "sgd" {
		t.Errorf("Named: %s", sgd)
	}
}
