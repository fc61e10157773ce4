package platform_test

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/gomlx/gomlx/pkg/ml/context"
	"github.com/gomlx/gomlx/pkg/ml/train/optimizers"

	"github.com/onegpu/onegpu/analysis"
	"github.com/onegpu/onegpu/platform"
)

// adamStep is a least-squares step of a linear layer under Adam: it updates the weights, two
// moments per weight and the step counter.
func adamStep(ctx *context.Context, inputs []*graph.Node) []*graph.Node {
	x, y := inputs[0], inputs[1]
	g := x.Graph()
	w := ctx.GetVariable("w")
	pred := graph.Dot(x, w.ValueGraph(g))
	loss := graph.ReduceAllMean(graph.Square(graph.Sub(pred, y)))
	optimizers.Adam().Done().UpdateGraph(ctx, g, loss)
	return []*graph.Node{loss}
}

// trained is what trainSteps returns.
type trained struct {
	values     map[string][]float64 // every variable after the steps
	aliasBytes int64                // XLA's aliased bytes (0 on the embedded backend)
	stateBytes int64                // bytes of the variables the step updates
}

// trainSteps runs three steps of adamStep on backend b. Before the last step it keeps the tensor
// of a variable the step consumes: afterwards that tensor must be finalized and read as empty,
// never as the new values XLA wrote into its buffer.
func trainSteps(t *testing.T, b backends.Backend, alias bool, x, y *tensors.Tensor) trained {
	t.Helper()
	ctx := context.New()
	ctx.VariableWithValue("w", tensors.FromShape(shapes.Make(dtypes.Float32, 8, 4)))
	step := adamStep
	if alias {
		step = platform.AliasUpdatedState(adamStep)
	}
	exec, err := context.NewExec(b, ctx, step)
	if err != nil {
		t.Fatal(err)
	}
	defer exec.Finalize()
	var g *graph.Graph
	var consumed *tensors.Tensor
	for i := range 3 {
		if i == 2 {
			consumed = ctx.GetVariable("w").MustValue()
		}
		if _, g, err = exec.ExecWithGraph(localClone(t, x), localClone(t, y)); err != nil {
			t.Fatal(err)
		}
	}
	r := trained{values: map[string][]float64{}}
	for v := range ctx.IterVariables() {
		r.values[v.ScopeAndName()] = flatFloat64(v.MustValue())
		if v.ChangedInGraph(g) {
			r.stateBytes += int64(v.Shape().Memory())
		}
	}
	if mem, err := analysis.CompiledMemoryOf(g); err == nil {
		r.aliasBytes = mem.AliasBytes
	}
	if consumed.Ok() {
		t.Errorf("the weights' tensor the last step consumed is still live")
	} else if got := flatFloat64(consumed); len(got) != 0 {
		t.Errorf("the weights' tensor the last step consumed reads %v", got)
	}
	return r
}

func localClone(t *testing.T, x *tensors.Tensor) *tensors.Tensor {
	c, err := x.LocalClone()
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func sameBits(a, b []float64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if math.Float64bits(a[i]) != math.Float64bits(b[i]) {
			return false
		}
	}
	return true
}

// TestAliasUpdatedState trains three Adam steps with and without aliasing the updated state: the
// variables come out bit-identical, and XLA aliases exactly the updated state.
func TestAliasUpdatedState(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	f32 := func(t *tensors.Tensor) *tensors.Tensor {
		v := flatFloat64(t)
		out := make([]float32, len(v))
		for i := range v {
			out[i] = float32(v[i])
		}
		return tensors.FromFlatDataAndDimensions(out, t.Shape().Dimensions...)
	}
	x, y := f32(randomTensor(rng, 16, 8)), f32(randomTensor(rng, 16, 4))
	for name, b := range backendsUnderTest(t) {
		plain := trainSteps(t, b, false, x, y)
		aliased := trainSteps(t, b, true, x, y)
		if len(plain.values) < 4 {
			t.Fatalf("%s: variables %v: want weights, two moments and a step counter", name, plain.values)
		}
		for v, want := range plain.values {
			if got := aliased.values[v]; !sameBits(got, want) {
				t.Errorf("%s: %s = %v aliased, %v plain", name, v, got, want)
			}
		}
		if name == "xla" && (plain.aliasBytes != 0 || aliased.aliasBytes != aliased.stateBytes) {
			t.Errorf("XLA aliased %d bytes plain and %d aliased; the updated state is %d bytes",
				plain.aliasBytes, aliased.aliasBytes, aliased.stateBytes)
		}
	}
}
