package gomlxcompat_test

import (
	"errors"
	"math"
	"slices"
	"testing"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/gomlx/gomlx/pkg/ml/context"

	"github.com/onegpu/onegpu/internal/backendtest"
	"github.com/onegpu/onegpu/internal/gomlxcompat"
)

// TestLoadedExecutable checks that a compiled XLA graph's PJRT executable and its memory
// statistics are found, and that another backend's graph is told apart.
func TestLoadedExecutable(t *testing.T) {
	build := func(b backends.Backend) *graph.Graph {
		g := graph.NewGraph(b, "stats")
		x := graph.Parameter(g, "x", shapes.Make(dtypes.Float32, 64))
		g.Compile(graph.MulScalar(x, 2))
		return g
	}
	g := build(backendtest.Embedded())
	if _, err := gomlxcompat.CompiledMemory(g); !errors.Is(err, gomlxcompat.ErrNotXLA) {
		t.Errorf("embedded graph: got %v, want ErrNotXLA", err)
	}
	g.Finalize()
	xb := backendtest.RequireXLA(t)
	g = build(xb)
	defer g.Finalize()
	stats, err := gomlxcompat.CompiledMemory(g)
	if err != nil {
		t.Fatal(err)
	}
	if stats.Inputs != 256 || stats.Outputs != 256 {
		t.Errorf("f32[64] -> f32[64]: XLA reports %d bytes of inputs and %d of outputs, want 256 and 256", stats.Inputs, stats.Outputs)
	}
}

// TestIntSliceParam reads back the static parameters the gradient rules and the memory analysis need.
func TestIntSliceParam(t *testing.T) {
	g := graph.NewGraph(backendtest.Embedded(), "params")
	defer g.Finalize()
	lhs := graph.Parameter(g, "lhs", shapes.Make(dtypes.Float32, 2, 3, 4))
	rhs := graph.Parameter(g, "rhs", shapes.Make(dtypes.Float32, 2, 4, 5))
	dot := graph.DotGeneral(lhs, []int{2}, []int{0}, rhs, []int{1}, []int{0})
	slice := graph.Slice(lhs, graph.AxisRange(), graph.AxisRange(1, 3), graph.AxisRange(0, 4).Stride(2))
	bcast := graph.ExpandAndBroadcast(graph.Parameter(g, "v", shapes.Make(dtypes.Float32, 4)), []int{3, 4}, []int{0})
	sum := graph.ReduceSum(lhs, 1)
	for _, c := range []struct {
		node  *graph.Node
		field string
		want  []int
	}{
		{dot, "lhsContractingAxes", []int{2}}, {dot, "lhsBatchAxes", []int{0}},
		{dot, "rhsContractingAxes", []int{1}}, {dot, "rhsBatchAxes", []int{0}},
		{slice, "starts", []int{0, 1, 0}}, {slice, "limits", []int{2, 3, 4}}, {slice, "strides", []int{1, 1, 2}},
		{bcast, "broadcastAxes", []int{1}},
		{sum, "axes", []int{1}},
	} {
		got, err := gomlxcompat.IntSliceParam(c.node, c.field)
		if err != nil || !slices.Equal(got, c.want) {
			t.Errorf("%s.%s = %v, %v; want %v", c.node.Type(), c.field, got, err, c.want)
		}
	}
	if _, err := gomlxcompat.IntSliceParam(dot, "noSuchField"); err == nil {
		t.Error("a missing field was read without an error")
	}
}

// TestMatmulBlockDim checks the block side graph/'s memory analysis assumes for simplego.
func TestMatmulBlockDim(t *testing.T) {
	for _, dt := range []dtypes.DType{dtypes.Float32, dtypes.Float64, dtypes.BFloat16} {
		if got := gomlxcompat.MatmulBlockDim(dt); got != 32 {
			t.Errorf("simplego's matmul block side for %s is %d, graph/'s memory analysis assumes 32", dt, got)
		}
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
	for name, b := range map[string]backends.Backend{"go": backendtest.Embedded(), "xla": backendtest.XLA()} {
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
	b := backendtest.RequireXLA(t)
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
