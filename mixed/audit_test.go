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

// TestAuditFindsLayersThatIgnoreThePolicy: under a bfloat16-compute policy, GoMLX's own layers on
// a float32 input compute in float32 (they compute in their input's dtype), and their variables
// are float32, as the policy's params are: AuditVariables sees nothing wrong. mixed.Audit reports
// each op that computes with their variables as stored, naming the variable: layers.Dense's
// matmul and bias, DenseWithBias on a rank-3 input (an Einsum whose weights are reshaped first,
// and its bias: before, only a matmul reading a variable directly was found), and
// LayerNormalization's gain and offset (no matmul at all: before, nothing was found). A layer that
// casts its variable and input to the compute dtype is not reported.
func TestAuditFindsLayersThatIgnoreThePolicy(t *testing.T) {
	policy := mixed.Policy{Param: f32, Compute: bf16, Output: f32}
	ctx := context.New()
	mixed.SetPolicy(ctx, policy)
	p, err := analysis.ContextProgram(embedded(), ctx, "layers", []shapes.Shape{shapes.Make(f32, 2, 4, 16)},
		func(ctx *context.Context, in []*graph.Node) []*graph.Node {
			x := in[0]
			h := gomlxlayers.Dense(ctx.In("gomlx_dense"), graph.Reshape(x, 8, 16), true, 16) // float32 in, float32 matmul
			h3 := gomlxlayers.DenseWithBias(ctx.In("gomlx_dense3"), x, 16)                   // an Einsum on rank 3
			n := gomlxlayers.LayerNormalization(ctx.In("gomlx_norm"), h3, -1).Done()
			w := ctx.In("cast_dense").VariableWithShape("kernel", shapes.Make(f32, 16, 4)).ValueGraph(x.Graph())
			y := graph.Dot(policy.CastToCompute(h), policy.CastToCompute(w)) // follows the policy
			return []*graph.Node{graph.Add(graph.ReduceAllSum(graph.ConvertDType(y, f32)), graph.ReduceAllSum(n))}
		})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Graph.Finalize()
	if findings := mixed.AuditVariables(ctx); len(findings) != 0 {
		t.Errorf("AuditVariables: %v, want none (every variable is float32, as the policy's params)", findings)
	}
	found := map[string]bool{}
	for _, f := range mixed.Audit(ctx, p.Graph, p.Outputs) {
		t.Logf("%s", f)
		if f.Kind == audit.ComputeDType && strings.Contains(f.Message, "in float32, where the policy computes in bfloat16") {
			found[f.Message[strings.Index(f.Message, "variable ")+len("variable "):strings.Index(f.Message, " as stored")]] = true
		}
	}
	want := []string{"/gomlx_dense/dense/weights", "/gomlx_dense/dense/biases", "/gomlx_dense3/dense/weights", "/gomlx_dense3/dense/biases",
		"/gomlx_norm/layer_normalization/gain", "/gomlx_norm/layer_normalization/offset"}
	for _, v := range want {
		if !found[v] {
			t.Errorf("no compute-dtype finding for %s", v)
		}
	}
	if len(found) != len(want) {
		t.Errorf("compute-dtype findings for %v, want exactly %v (not /cast_dense/kernel)", found, want)
	}

	// Under a float32 policy the same float32 ops are what the policy asks for.
	mixed.SetPolicy(ctx, mixed.Float32)
	if n := audit.CountFindings(mixed.Audit(ctx, p.Graph, p.Outputs), audit.ComputeDType); n != 0 {
		t.Errorf("float32 policy: %d compute-dtype findings, want 0", n)
	}
}
