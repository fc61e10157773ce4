package mixed_test

import (
	"bytes"
	"math/rand/v2"
	"testing"

	"github.com/gomlx/gomlx/pkg/core/dtypes/bfloat16"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/gomlx/gomlx/pkg/ml/context"
	"github.com/gomlx/gomlx/pkg/ml/train/optimizers"

	"github.com/onegpu/onegpu/internal/testkit"
	"github.com/onegpu/onegpu/mixed"
	"github.com/onegpu/onegpu/optim"
)

// embedded is the embedded backend in sequential mode, shared by the tests.
var embedded = testkit.Embedded

// backendsUnderTest returns the embedded backend and, when a PJRT plugin is configured, XLA.
var backendsUnderTest = testkit.All

// run builds fn on the embedded backend, executes it on inputs and returns every output as float64.
func run(t testing.TB, fn func(xs []*graph.Node) []*graph.Node, inputs ...*tensors.Tensor) [][]float64 {
	t.Helper()
	return runOn(t, embedded(), fn, inputs...)
}

// runOn builds fn on a backend, runs it on inputs and returns the outputs as float64.
var runOn = testkit.Run

// flatFloat64 returns a tensor's values as float64.
var flatFloat64 = testkit.Floats

// bf16Tensor returns a bfloat16 tensor of values drawn by draw, and the same values as float64.
func bf16Tensor(draw func() float64, dims ...int) (*tensors.Tensor, []float64) {
	n := 1
	for _, d := range dims {
		n *= d
	}
	v := make([]bfloat16.BFloat16, n)
	exact := make([]float64, n)
	for i := range v {
		v[i] = bfloat16.FromFloat64(draw())
		exact[i] = float64(v[i].Float32())
	}
	return tensors.FromFlatDataAndDimensions(v, dims...), exact
}

// normal returns a generator of N(mean, std) values.
func normal(seed uint64, mean, std float64) func() float64 {
	rng := rand.New(rand.NewPCG(seed, 3))
	return func() float64 { return mean + std*rng.NormFloat64() }
}

// snapshot returns the raw bytes of every variable of ctx, by scope and name.
func snapshot(t testing.TB, ctx *context.Context) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	for v := range ctx.IterVariables() {
		value, err := v.Value()
		if err != nil {
			t.Fatalf("variable %s: %v", v.ScopeAndName(), err)
		}
		if err := value.ConstBytes(func(data []byte) { out[v.ScopeAndName()] = bytes.Clone(data) }); err != nil {
			t.Fatalf("variable %s: %v", v.ScopeAndName(), err)
		}
	}
	return out
}

// scalarOf returns the value of a scalar variable as float64.
func scalarOf(t testing.TB, ctx *context.Context, scope, name string) float64 {
	t.Helper()
	v := ctx.GetVariableByScopeAndName(scope, name)
	if v == nil {
		t.Fatalf("no variable %s/%s", scope, name)
	}
	return flatFloat64(v.MustValue())[0]
}

// withLossScale is the chain LossScale(ls) -> Apply(opt): opt with loss scaling and an atomic skip
// of non-finite steps.
func withLossScale(opt optimizers.Interface, ls mixed.LossScale) *optim.Chain {
	chain, err := optim.NewChain(optim.LossScale(ls), optim.Apply(opt))
	if err != nil {
		panic(err)
	}
	return chain
}
