//go:build cgo && !noxla

package gomlxcompat_test

import (
	"math"
	"os"
	"slices"
	"sync"
	"testing"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/backends/xla"
	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/gomlx/gomlx/pkg/ml/context"

	"github.com/onegpu/onegpu/internal/gomlxcompat"
)

// xlaBackend is GoMLX's XLA backend with the plugin $ONEGPU_PJRT_PLUGIN names (nil without one),
// created directly, without onegpu's platform above this package.
var xlaBackend = sync.OnceValue(func() backends.Backend {
	plugin := os.Getenv("ONEGPU_PJRT_PLUGIN")
	if plugin == "" {
		return nil
	}
	xla.EnableAutoInstall(false)
	b, err := xla.NewWithOptions(plugin, nil)
	if err != nil {
		panic(err)
	}
	return b
})

func requireXLA(t testing.TB) backends.Backend {
	t.Helper()
	b := xlaBackend()
	if b == nil {
		t.Skip("needs an XLA PJRT plugin: set $ONEGPU_PJRT_PLUGIN=/abs/path/pjrt_c_api_cpu_plugin.so (pip install lammps-jax-pjrt-cpu)")
	}
	return b
}

// TestCompiledMemory checks that a compiled XLA graph's PJRT executable and its memory
// statistics are found.
// TestIsSimpleGoNotXLA: XLA, whose matmuls allocate no scratch, is not simplego.
func TestIsSimpleGoNotXLA(t *testing.T) {
	if gomlxcompat.IsSimpleGo(requireXLA(t)) {
		t.Error("XLA is taken for simplego")
	}
}

func TestCompiledMemory(t *testing.T) {
	build := func(b backends.Backend) *graph.Graph {
		g := graph.NewGraph(b, "stats")
		x := graph.Parameter(g, "x", shapes.Make(dtypes.Float32, 64))
		g.Compile(graph.MulScalar(x, 2))
		return g
	}
	g := build(requireXLA(t))
	defer g.Finalize()
	stats, err := gomlxcompat.CompiledMemory(g)
	if err != nil {
		t.Fatal(err)
	}
	if stats.Inputs != 256 || stats.Outputs != 256 {
		t.Errorf("f32[64] -> f32[64]: XLA reports %d bytes of inputs and %d of outputs, want 256 and 256", stats.Inputs, stats.Outputs)
	}
}

// TestAliasOutputs runs state += x with the state aliased and donated: XLA counts the alias, the
// results are bit-identical to the unaliased program, and the donated buffer cannot be read after
// the step. On the embedded backend declaring aliases changes nothing.
func TestAliasOutputs(t *testing.T) {
	state := []float32{1.5, -2.25, 3e-8, 7}
	x := []float32{0.1, 0.2, 0.3, 1e8}
	run := func(b backends.Backend, alias bool) (out []float32, donated backends.Buffer, aliasBytes int64) {
		g := graph.NewGraph(b, "alias")
		defer g.Finalize()
		s := graph.Parameter(g, "state", shapes.Make(dtypes.Float32, 4))
		xs := graph.Parameter(g, "x", shapes.Make(dtypes.Float32, 4))
		if alias {
			if err := gomlxcompat.AliasOutputs(g, []gomlxcompat.Alias{{Parameter: s.GetParameterHandle(), Output: 1}}); err != nil {
				t.Fatal(err)
			}
		}
		g.Compile(graph.ReduceAllSum(s), graph.Add(s, xs))
		if stats, err := gomlxcompat.CompiledMemory(g); err == nil {
			aliasBytes = stats.Aliases
		}
		st := tensors.FromValue(slices.Clone(state))
		donated, err := st.DonateBuffer(b, 0)
		if err != nil {
			t.Fatal(err)
		}
		xb, err := tensors.FromValue(slices.Clone(x)).Buffer(b, 0)
		if err != nil {
			t.Fatal(err)
		}
		outs := g.RunWithBuffers([]backends.Buffer{donated, xb}, []bool{true, false}, 0)
		return outs[1].Value().([]float32), donated, aliasBytes
	}
	for name, b := range map[string]backends.Backend{"go": embedded(), "xla": xlaBackend()} {
		if b == nil {
			t.Logf("no PJRT plugin: XLA not tested")
			continue
		}
		plain, _, plainAlias := run(b, false)
		aliased, donated, aliasBytes := run(b, true)
		for i := range plain {
			if math.Float32bits(plain[i]) != math.Float32bits(aliased[i]) || plain[i] != state[i]+x[i] {
				t.Errorf("%s: state+x[%d]: plain %v, aliased %v, want %v", name, i, plain[i], aliased[i], state[i]+x[i])
			}
		}
		if name != "xla" {
			continue
		}
		if plainAlias != 0 || aliasBytes != 16 {
			t.Errorf("XLA aliased bytes: %d without the alias, %d with it; want 0 and 16", plainAlias, aliasBytes)
		}
		if err := b.BufferToFlatData(donated, make([]float32, 4)); err == nil {
			t.Errorf("the donated state buffer could still be read after the step")
		}
	}
}

// TestContextExecAliases aliases the variables a context.Exec step updates, in the order
// context.Exec returns them. Variables of different shapes make a wrong order a compile error.
func TestContextExecAliases(t *testing.T) {
	b := requireXLA(t)
	ctx := context.New()
	ctx.VariableWithValue("a", []float32{1, 2, 3})
	ctx.VariableWithValue("frozen", []float32{10, 20})
	ctx.VariableWithValue("b", []float32{1, 1, 1, 1, 1})
	var declared []gomlxcompat.Alias
	exec, err := context.NewExec(b, ctx, func(ctx *context.Context, x *graph.Node) *graph.Node {
		g := x.Graph()
		va, vf, vb := ctx.GetVariable("a"), ctx.GetVariable("frozen"), ctx.GetVariable("b")
		f := graph.ReduceAllSum(vf.ValueGraph(g))
		vb.SetValueGraph(graph.AddScalar(vb.ValueGraph(g), 1))
		va.SetValueGraph(graph.Add(graph.Mul(va.ValueGraph(g), x), f))
		if err := gomlxcompat.AliasOutputs(g, gomlxcompat.ContextExecAliases(ctx, g)); err != nil {
			panic(err)
		}
		declared, _ = gomlxcompat.DeclaredAliases(g)
		return graph.ReduceAllSum(va.ValueGraph(g))
	})
	if err != nil {
		t.Fatal(err)
	}
	defer exec.Finalize()
	var out []*tensors.Tensor
	var g *graph.Graph
	for range 2 {
		if out, g, err = exec.ExecWithGraph(float32(2)); err != nil {
			t.Fatal(err)
		}
	}
	// a = (a*2 + 30) twice: 1 -> 32 -> 94; 2 -> 34 -> 98; 3 -> 36 -> 102.
	if got := ctx.GetVariable("a").MustValue().Value().([]float32); !slices.Equal(got, []float32{94, 98, 102}) {
		t.Errorf("a after two steps = %v, want [94 98 102]", got)
	}
	if got := ctx.GetVariable("b").MustValue().Value().([]float32); !slices.Equal(got, []float32{3, 3, 3, 3, 3}) {
		t.Errorf("b after two steps = %v, want 3s", got)
	}
	if got := out[0].Value().(float32); got != 294 {
		t.Errorf("step output = %v, want 294", got)
	}
	if len(declared) != 2 {
		t.Errorf("declared aliases %+v, want the two updated variables", declared)
	}
	stats, err := gomlxcompat.CompiledMemory(g)
	if err != nil {
		t.Fatal(err)
	}
	if stats.Aliases != 3*4+5*4 {
		t.Errorf("XLA aliases %d bytes, want the updated variables' 32", stats.Aliases)
	}
}
