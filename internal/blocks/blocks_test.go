package blocks_test

import (
	"reflect"
	"strings"
	"testing"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/gomlx/gomlx/pkg/ml/context"

	"github.com/onegpu/onegpu/analysis"
	"github.com/onegpu/onegpu/internal/blocks"
	"github.com/onegpu/onegpu/internal/testkit"
	"github.com/onegpu/onegpu/remat"
)

// embedded is the embedded backend in sequential mode, shared by the tests.
var embedded = testkit.Embedded

var small = blocks.Config{Batch: 2, Seq: 16, Width: 32, Heads: 4, Blocks: 3}

func TestValidate(t *testing.T) {
	if err := blocks.Default().Validate(); err != nil {
		t.Errorf("Default(): %v", err)
	}
	for _, c := range []struct {
		change   func(*blocks.Config)
		mentions string
	}{
		{func(c *blocks.Config) { c.Blocks = 0 }, "must be positive"},
		{func(c *blocks.Config) { c.Heads = 5 }, "multiple of heads"},
		{func(c *blocks.Config) { c.Dropout = 1 }, "dropout"},
		{func(c *blocks.Config) { c.Compute = dtypes.Int32 }, "not a float"},
	} {
		cfg := small
		c.change(&cfg)
		if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), c.mentions) {
			t.Errorf("Validate(%+v) = %v, want an error mentioning %q", cfg, err, c.mentions)
		}
	}
}

// TestParameters: Parameters counts the variables the model creates.
func TestParameters(t *testing.T) {
	ctx := context.New()
	p, err := analysis.ContextProgram(embedded(), ctx, "count", []shapes.Shape{small.InputShape()}, blocks.GradientStep(small, blocks.Spec{}, remat.Config{}))
	if err != nil {
		t.Fatal(err)
	}
	p.Graph.Finalize()
	n := 0
	for v := range ctx.IterVariables() {
		if v.Trainable {
			n += v.Shape().Size()
		}
	}
	if n != small.Parameters() {
		t.Errorf("the model has %d parameters, Parameters() says %d", n, small.Parameters())
	}
}

// TestAnalyze: each spec checkpoints the sublayers it names, under their scopes, and the
// activation bytes at the peak shrink with them.
func TestAnalyze(t *testing.T) {
	var none int64
	for _, c := range []struct {
		spec  string
		names []string // the first blocks' names
	}{
		{"none", nil},
		{"mlp", []string{"/block_00/mlp", "/block_01/mlp"}},
		{"attn", []string{"/block_00/attn", "/block_01/attn"}},
		{"mlp,attn", []string{"/block_00/attn", "/block_00/mlp", "/block_01/attn"}},
		{"block", []string{"/block_00", "/block_01"}},
	} {
		spec, err := blocks.ParseSpec(c.spec)
		if err != nil {
			t.Fatal(err)
		}
		a, err := blocks.Analyze(embedded(), small, spec, remat.With(remat.DotsWithNoBatchDimsSaveable))
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, b := range a.Residuals.Blocks {
			names = append(names, b.Block)
			if b.Policy != "dots_with_no_batch_dims_saveable" {
				t.Errorf("%s: block %s has policy %s", c.spec, b.Block, b.Policy)
			}
		}
		perLayer := map[string]int{"none": 0, "mlp": 1, "attn": 1, "mlp,attn": 2, "block": 1}[c.spec]
		if len(names) != perLayer*small.Blocks || !reflect.DeepEqual(names[:min(len(names), len(c.names))], c.names) {
			t.Errorf("%s: blocks %v, want %d starting with %v", c.spec, names, perLayer*small.Blocks, c.names)
		}
		act := a.Memory.Breakdown[analysis.Activations]
		t.Logf("%-8s activations at the peak %.1f KiB, residuals in blocks %.1f KiB, outside %.1f KiB",
			c.spec, float64(act)/1024, float64(a.Residuals.BlockBytes)/1024, float64(a.Residuals.OutsideBytes)/1024)
		if c.spec == "none" {
			none = act
		} else if act >= none {
			t.Errorf("%s: %d activation bytes at the peak, no fewer than without checkpoints (%d)", c.spec, act, none)
		}
	}
	if _, err := blocks.Analyze(embedded(), blocks.Config{}, blocks.Spec{}, remat.Config{}); err == nil {
		t.Errorf("Analyze accepted an empty config")
	}
}

// TestBFloat16Compute: with float32 parameters and bfloat16 arithmetic (float32 statistics and
// softmax), the loss and gradients stay close to the float32 model's. Close means 15% here: the
// embedded backend converts float32 to bfloat16 by truncation (1.007 becomes 1, not 1.0078), about
// 1% per dense layer, and six sublayers compound it. A 16-bit reduction would be far worse.
func TestBFloat16Compute(t *testing.T) {
	x := blocks.RandomInput(small, 3)
	ctx := context.New().Checked(false)
	ctx.SetParam(context.ParamInitialSeed, int64(5))
	run := func(compute dtypes.DType) [][]float64 {
		c := small
		c.Compute = compute
		exec, err := context.NewExec(embedded(), ctx, blocks.GradientStep(c, blocks.Spec{Block: true}, remat.Config{}))
		if err != nil {
			t.Fatal(err)
		}
		defer exec.Finalize()
		outs, err := exec.Exec(x)
		if err != nil {
			t.Fatal(err)
		}
		values := make([][]float64, len(outs))
		for i, o := range outs {
			values[i] = testkit.Floats(o)
		}
		return values
	}
	want, got := run(dtypes.Float32), run(dtypes.BFloat16)
	worst := 0.0
	for i := range want {
		worst = max(worst, testkit.RelL2(got[i], want[i]))
	}
	t.Logf("loss %.5f (bfloat16) vs %.5f; worst relative L2 error over loss and %d gradients %.4f", got[0][0], want[0][0], len(want)-1, worst)
	if worst > 0.15 {
		t.Errorf("bfloat16 compute is %.3f off float32 (relative L2), want <= 0.15", worst)
	}
}
