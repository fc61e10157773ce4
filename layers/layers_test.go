package layers_test

import (
	"strings"
	"testing"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/gomlx/gomlx/pkg/ml/context"
	gomlxlayers "github.com/gomlx/gomlx/pkg/ml/layers"

	"github.com/onegpu/onegpu/audit"
	"github.com/onegpu/onegpu/internal/panics"
	"github.com/onegpu/onegpu/internal/testkit"
	"github.com/onegpu/onegpu/layers"
	"github.com/onegpu/onegpu/mixed"
)

var bf16Compute = mixed.Policy{Param: dtypes.Float32, Compute: dtypes.BFloat16, Output: dtypes.Float32}

// build runs fn on a float32 input [8, 16] in a new graph and context and returns the context.
func build(t *testing.T, fn func(ctx *context.Context, x *graph.Node)) *context.Context {
	t.Helper()
	ctx := context.New()
	g := graph.NewGraph(testkit.Embedded(), "layers")
	defer g.Finalize()
	err := panics.Catch(func() { fn(ctx, graph.Parameter(g, "x", shapes.Make(dtypes.Float32, 8, 16))) })
	if err != nil {
		t.Fatal(err)
	}
	return ctx
}

// TestPolicyOnScope: a policy set on a scope reaches every layer below it (float32 parameters,
// bfloat16 outputs), a scope below can set its own, and the audit finds nothing to report.
func TestPolicyOnScope(t *testing.T) {
	var body, head, norm *graph.Node
	ctx := build(t, func(ctx *context.Context, x *graph.Node) {
		mixed.SetPolicy(ctx, bf16Compute)
		body = layers.Dense(ctx.In("body"), x, 32)
		norm = layers.LayerNorm(ctx.In("norm"), body)
		mixed.SetPolicy(ctx.In("head"), mixed.Float32)
		head = layers.Dense(ctx.In("head").In("out"), norm, 4)
	})
	if body.DType() != dtypes.BFloat16 || norm.DType() != dtypes.BFloat16 || head.DType() != dtypes.Float32 {
		t.Errorf("outputs: body %s, norm %s, head %s; want bfloat16, bfloat16, float32", body.DType(), norm.DType(), head.DType())
	}
	n := 0
	for v := range ctx.IterVariables() {
		n++
		if v.DType() != dtypes.Float32 {
			t.Errorf("variable %s is %s, want float32", v.ScopeAndName(), v.DType())
		}
	}
	if n != 6 {
		t.Errorf("%d variables, want 6 (2 Dense, 1 LayerNorm)", n)
	}
	if findings := mixed.AuditVariables(ctx); len(findings) != 0 {
		t.Errorf("findings for policy-aware layers: %v", findings)
	}
	if got := mixed.PolicyOf(context.New()); got != mixed.Float32 {
		t.Errorf("policy without SetPolicy: %s, want float32", got)
	}
}

// TestAuditFindsGoMLXLayerParams: GoMLX's own Dense, given the input cast to bfloat16, creates
// bfloat16 parameters; the audit reports each of them, naming the variable and both dtypes.
func TestAuditFindsGoMLXLayerParams(t *testing.T) {
	ctx := build(t, func(ctx *context.Context, x *graph.Node) {
		mixed.SetPolicy(ctx, bf16Compute)
		h := layers.Dense(ctx.In("mine"), x, 8)
		gomlxlayers.DenseWithBias(ctx.In("theirs"), h, 4)
	})
	findings := mixed.AuditVariables(ctx)
	if len(findings) != 2 {
		t.Fatalf("%d findings, want 2 (GoMLX's weights and biases): %v", len(findings), findings)
	}
	for _, f := range findings {
		if f.Kind != audit.ParamDType || !strings.Contains(f.Message, "/theirs") ||
			!strings.Contains(f.Message, "is bfloat16 but the policy's param dtype is float32") {
			t.Errorf("finding %q", f)
		}
	}
}
