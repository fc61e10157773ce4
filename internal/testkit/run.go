package testkit

import (
	"math/rand/v2"
	"reflect"
	"testing"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/gomlx/gomlx/pkg/ml/context"
)

// Run builds fn on backend, executes it on inputs and returns every output as float64 values.
func Run(t testing.TB, backend backends.Backend, fn func(xs []*graph.Node) []*graph.Node, inputs ...*tensors.Tensor) [][]float64 {
	t.Helper()
	return FloatsOf(Execute(t, backend, fn, inputs...))
}

// RunContext is Run for a function of ctx's variables (created on the first run).
func RunContext(t testing.TB, backend backends.Backend, ctx *context.Context,
	fn func(ctx *context.Context, xs []*graph.Node) []*graph.Node, inputs ...*tensors.Tensor) [][]float64 {
	t.Helper()
	exec, err := context.NewExec(backend, ctx, fn)
	if err != nil {
		t.Fatal(err)
	}
	defer exec.Finalize()
	return FloatsOf(Call(t, exec, inputs...))
}

// Execute builds fn on backend, executes it on inputs and returns its outputs.
func Execute(t testing.TB, backend backends.Backend, fn func(xs []*graph.Node) []*graph.Node, inputs ...*tensors.Tensor) []*tensors.Tensor {
	t.Helper()
	exec, err := graph.NewExec(backend, fn)
	if err != nil {
		t.Fatal(err)
	}
	defer exec.Finalize()
	return Call(t, exec, inputs...)
}

// Executor is what graph.Exec and context.Exec have in common.
type Executor interface {
	Exec(args ...any) ([]*tensors.Tensor, error)
}

// Call executes exec on inputs and returns its outputs, failing t on an error.
func Call(t testing.TB, exec Executor, inputs ...*tensors.Tensor) []*tensors.Tensor {
	t.Helper()
	args := make([]any, len(inputs))
	for i, in := range inputs {
		args[i] = in
	}
	outs, err := exec.Exec(args...)
	if err != nil {
		t.Fatal(err)
	}
	return outs
}

// FloatsOf returns every tensor's values as float64 (see Floats).
func FloatsOf(ts []*tensors.Tensor) [][]float64 {
	values := make([][]float64, len(ts))
	for i, x := range ts {
		values[i] = Floats(x)
	}
	return values
}

// Floats returns a tensor's values as float64: floats of any width (bfloat16 and float16
// included), integers, and booleans as 0 or 1.
func Floats(t *tensors.Tensor) []float64 {
	var out []float64
	t.ConstFlatData(func(flat any) {
		rv := reflect.ValueOf(flat)
		for i := range rv.Len() {
			switch v := rv.Index(i).Interface().(type) {
			case interface{ Float32() float32 }: // bfloat16, float16
				out = append(out, float64(v.Float32()))
			case bool:
				if v {
					out = append(out, 1)
				} else {
					out = append(out, 0)
				}
			default:
				out = append(out, rv.Index(i).Convert(reflect.TypeOf(float64(0))).Float())
			}
		}
	})
	return out
}

// NormalTensor returns a float64 tensor of dims with N(0, 1) values drawn from rng.
func NormalTensor(rng *rand.Rand, dims ...int) *tensors.Tensor {
	return NormalInput(rng, dims...).tensor()
}
