package mixed_test

import (
	"bytes"
	"math"
	"math/rand/v2"
	"os"
	"reflect"
	"sync"
	"testing"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/dtypes/bfloat16"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/gomlx/gomlx/pkg/ml/context"

	ograph "github.com/onegpu/onegpu/graph"
)

// embedded is the embedded backend in onegpu's default (sequential) mode, shared by the tests.
var embedded = sync.OnceValue(func() backends.Backend {
	b, err := ograph.NewBackend("go")
	if err != nil {
		panic(err)
	}
	return b
})

// xlaBackend is XLA with the plugin named by $ONEGPU_PJRT_PLUGIN, or nil without one.
var xlaBackend = sync.OnceValue(func() backends.Backend {
	plugin := os.Getenv(ograph.EnvPlugin)
	if plugin == "" {
		return nil
	}
	b, err := ograph.NewBackend("xla:" + plugin)
	if err != nil {
		panic(err)
	}
	return b
})

// backendsUnderTest returns the embedded backend and, when a PJRT plugin is configured, XLA.
func backendsUnderTest() []backends.Backend {
	if b := xlaBackend(); b != nil {
		return []backends.Backend{embedded(), b}
	}
	return []backends.Backend{embedded()}
}

// run builds fn on the embedded backend, executes it on inputs and returns every output as float64.
func run(t testing.TB, fn func(xs []*graph.Node) []*graph.Node, inputs ...*tensors.Tensor) [][]float64 {
	t.Helper()
	return runOn(t, embedded(), fn, inputs...)
}

// runOn is run on a given backend.
func runOn(t testing.TB, backend backends.Backend, fn func(xs []*graph.Node) []*graph.Node, inputs ...*tensors.Tensor) [][]float64 {
	t.Helper()
	exec, err := graph.NewExec(backend, fn)
	if err != nil {
		t.Fatal(err)
	}
	defer exec.Finalize()
	args := make([]any, len(inputs))
	for i, in := range inputs {
		args[i] = in
	}
	outs, err := exec.Exec(args...)
	if err != nil {
		t.Fatal(err)
	}
	values := make([][]float64, len(outs))
	for i, out := range outs {
		values[i] = flatFloat64(out)
	}
	return values
}

// flatFloat64 returns a tensor's values as float64 (bool as 0/1).
func flatFloat64(t *tensors.Tensor) []float64 {
	var out []float64
	t.ConstFlatData(func(flat any) {
		rv := reflect.ValueOf(flat)
		for i := range rv.Len() {
			switch v := rv.Index(i).Interface().(type) {
			case interface{ Float32() float32 }: // bfloat16, float16
				out = append(out, float64(v.Float32()))
			case bool:
				out = append(out, map[bool]float64{false: 0, true: 1}[v])
			default:
				out = append(out, rv.Index(i).Convert(reflect.TypeOf(float64(0))).Float())
			}
		}
	})
	return out
}

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

// relL2 returns ||got - want|| / ||want||.
func relL2(got, want []float64) float64 {
	var num, den float64
	for i := range want {
		d := got[i] - want[i]
		num += d * d
		den += want[i] * want[i]
	}
	if den == 0 {
		return math.Sqrt(num)
	}
	return math.Sqrt(num / den)
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
