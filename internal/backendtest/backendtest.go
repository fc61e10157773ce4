// Package backendtest gives onegpu's tests the backends they run on — the embedded backend always,
// XLA when $ONEGPU_PJRT_PLUGIN names a PJRT plugin (CI installs one) — and runs graph functions on
// them with float64 results.
package backendtest

import (
	"os"
	"reflect"
	"sync"
	"testing"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/gomlx/gomlx/pkg/ml/context"

	ograph "github.com/onegpu/onegpu/graph"
)

// Embedded returns the embedded backend in onegpu's default (sequential) mode, shared by a test binary.
var Embedded = sync.OnceValue(func() backends.Backend {
	b, err := ograph.NewBackend("go")
	if err != nil {
		panic(err)
	}
	return b
})

// XLA returns XLA with the plugin named by $ONEGPU_PJRT_PLUGIN, or nil when none is named.
var XLA = sync.OnceValue(func() backends.Backend {
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

// All returns the embedded backend and, when a PJRT plugin is configured, XLA.
func All() []backends.Backend {
	if b := XLA(); b != nil {
		return []backends.Backend{Embedded(), b}
	}
	return []backends.Backend{Embedded()}
}

// RequireXLA returns XLA's backend or skips the test, saying how to get a plugin.
func RequireXLA(t testing.TB) backends.Backend {
	t.Helper()
	b := XLA()
	if b == nil {
		t.Skipf("needs an XLA PJRT plugin: set $%s=/abs/path/pjrt_c_api_cpu_plugin.so (pip install lammps-jax-pjrt-cpu)", ograph.EnvPlugin)
	}
	return b
}

// Run builds fn on backend, executes it on inputs and returns every output as float64 values.
func Run(t testing.TB, backend backends.Backend, fn func(xs []*graph.Node) []*graph.Node, inputs ...*tensors.Tensor) [][]float64 {
	t.Helper()
	exec, err := graph.NewExec(backend, fn)
	if err != nil {
		t.Fatal(err)
	}
	defer exec.Finalize()
	return floatOutputs(t, exec.Exec, inputs)
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
	return floatOutputs(t, exec.Exec, inputs)
}

// floatOutputs executes run on inputs and returns every output as float64 values.
func floatOutputs(t testing.TB, run func(args ...any) ([]*tensors.Tensor, error), inputs []*tensors.Tensor) [][]float64 {
	t.Helper()
	args := make([]any, len(inputs))
	for i, in := range inputs {
		args[i] = in
	}
	outs, err := run(args...)
	if err != nil {
		t.Fatal(err)
	}
	values := make([][]float64, len(outs))
	for i, out := range outs {
		values[i] = Floats(out)
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
