package remat_test

import (
	"testing"

	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/gomlx/gomlx/pkg/ml/context"

	"github.com/onegpu/onegpu/analysis"
	"github.com/onegpu/onegpu/internal/blocks"
	"github.com/onegpu/onegpu/internal/testkit"
	"github.com/onegpu/onegpu/remat"
)

// TestInferenceUnchanged: a graph that asks for no gradient computes the same values with
// checkpoints, and runs only a few small extra nodes per block: per entry point (input or
// variable) an identity and a sum, per block a scalar tie, per output an addition of that scalar.
func TestInferenceUnchanged(t *testing.T) {
	c := tiny
	x := blocks.RandomInput(c, 9)
	infer := func(spec string) (outs []*tensors.Tensor, m *analysis.Memory) {
		s, _ := blocks.ParseSpec(spec)
		ctx := context.New()
		ctx.SetParam(context.ParamInitialSeed, int64(42))
		fn := func(ctx *context.Context, x *graph.Node) *graph.Node {
			y := blocks.Forward(ctx, x, c, s, remat.Config{})
			m = analysis.Analyze(analysis.NewProgram(x.Graph(), y))
			return y
		}
		exec, err := context.NewExec(embedded(), ctx, fn)
		if err != nil {
			t.Fatal(err)
		}
		defer exec.Finalize()
		outs, err = exec.Exec(x)
		if err != nil {
			t.Fatal(err)
		}
		return outs, m
	}
	want, plain := infer("none")
	for _, spec := range []string{"mlp,attn", "block"} {
		got, m := infer(spec)
		testkit.AssertBitIdentical(t, got, want)
		checkpoints := c.Blocks * map[string]int{"mlp,attn": 2, "block": 1}[spec]
		// Per layer, the attention reads its input and 7 variables (4 kernels, a bias, a norm's
		// scale and offset), the MLP its input and 6 variables.
		entries := c.Blocks * 15
		extra := m.ExecutedNodes - plain.ExecutedNodes
		limit := 5*entries + 4*checkpoints
		t.Logf("%s: %d executed nodes, %d without checkpoints (%d checkpoints, %d entry points); FLOPs %d vs %d",
			spec, m.ExecutedNodes, plain.ExecutedNodes, checkpoints, entries, m.FLOPs, plain.FLOPs)
		if extra > limit {
			t.Errorf("%s: %d extra executed nodes, want at most %d", spec, extra, limit)
		}
		if float64(m.FLOPs) > 1.05*float64(plain.FLOPs) {
			t.Errorf("%s: %d FLOPs, %d without checkpoints: more than 5%% extra", spec, m.FLOPs, plain.FLOPs)
		}
	}
}
