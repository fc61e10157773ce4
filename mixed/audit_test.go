package mixed_test

import (
	"strings"
	"testing"

	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/gomlx/gomlx/pkg/ml/context"
	gomlxlayers "github.com/gomlx/gomlx/pkg/ml/layers"

	"github.com/onegpu/onegpu/analysis"
	"github.com/onegpu/onegpu/audit"
	"github.com/onegpu/onegpu/mixed"
)

// TestAuditFindsLayersThatIgnoreThePolicy: under a bfloat16-compute policy, GoMLX's own
// layers.Dense on a float32 input multiplies in float32 (it computes in its input's dtype), and
// its variables are float32, as the policy's params are: AuditVariables sees nothing wrong, and
// before mixed.Audit nothing said so. mixed.Audit reports the matmul, naming the layer's scope; a
// layer that casts its variable and input to the compute dtype is not reported.
func TestAuditFindsLayersThatIgnoreThePolicy(t *testing.T) {
	policy := mixed.Policy{Param: f32, Compute: bf16, Output: f32}
	ctx := context.New()
	mixed.SetPolicy(ctx, policy)
	p, err := analysis.ContextProgram(embedded(), ctx, "layers", []shapes.Shape{shapes.Make(f32, 8, 16)},
		func(ctx *context.Context, in []*graph.Node) []*graph.Node {
			x := in[0]
			h := gomlxlayers.Dense(ctx.In("gomlx_dense"), x, true, 16) // float32 in, float32 matmul
			w := ctx.In("cast_dense").VariableWithShape("kernel", shapes.Make(f32, 16, 4)).ValueGraph(x.Graph())
			y := graph.Dot(policy.CastToCompute(h), policy.CastToCompute(w)) // follows the policy
			return []*graph.Node{graph.ReduceAllSum(graph.ConvertDType(y, f32))}
		})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Graph.Finalize()
	if findings := mixed.AuditVariables(ctx); len(findings) != 0 {
		t.Errorf("AuditVariables: %v, want none (every variable is float32, as the policy's params)", findings)
	}
	findings := mixed.Audit(ctx, p.Graph, p.Outputs)
	for _, f := range findings {
		t.Logf("%s", f)
	}
	var compute []audit.Finding
	for _, f := range findings {
		if f.Kind == audit.ComputeDType {
			compute = append(compute, f)
		}
	}
	if len(compute) != 1 || compute[0].Scope != "/gomlx_dense/dense" || !strings.Contains(compute[0].Message, "float32") ||
		!strings.Contains(compute[0].Message, "bfloat16") {
		t.Errorf("compute-dtype findings %v, want one for /gomlx_dense/dense (float32 where the policy computes in bfloat16)", compute)
	}

	// Under a float32 policy the same float32 matmul is what the policy asks for.
	mixed.SetPolicy(ctx, mixed.Float32)
	if n := audit.CountFindings(mixed.Audit(ctx, p.Graph, p.Outputs), audit.ComputeDType); n != 0 {
		t.Errorf("float32 policy: %d compute-dtype findings, want 0", n)
	}
}
