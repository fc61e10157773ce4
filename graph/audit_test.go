package graph_test

import (
	"testing"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/shapes"

	ograph "github.com/onegpu/onegpu/graph"
	"github.com/onegpu/onegpu/internal/tutorialmlp"
)

func TestAudit(t *testing.T) {
	bf16, f32 := dtypes.BFloat16, dtypes.Float32
	for _, tc := range []struct {
		name string
		fn   func(x, w *graph.Node) *graph.Node // x: bfloat16 [8, 4]; w: float32 parameter [4, 4]
		want map[ograph.FindingKind]int
	}{
		{"clean: cast weight, sum in float32", func(x, w *graph.Node) *graph.Node {
			return ograph.SumInFloat32(graph.Dot(x, graph.ConvertDType(w, bf16)))
		}, nil},
		{"bfloat16 ReduceSum", func(x, w *graph.Node) *graph.Node {
			return graph.ReduceAllSum(graph.Dot(x, graph.ConvertDType(w, bf16)))
		}, map[ograph.FindingKind]int{ograph.Reduction16: 1}},
		{"uncast parameter", func(x, w *graph.Node) *graph.Node {
			return graph.ConvertDType(graph.Dot(graph.ConvertDType(x, f32), w), bf16)
		}, map[ograph.FindingKind]int{ograph.UncastParameter: 1}},
		{"float32 detour", func(x, w *graph.Node) *graph.Node {
			half := graph.Const(x.Graph(), float32(0.5))
			return graph.ConvertDType(graph.Mul(graph.ConvertDType(x, f32), half), bf16)
		}, map[ograph.FindingKind]int{ograph.Float32Detour: 1}},
		{"float32 island with a reduction is fine", func(x, w *graph.Node) *graph.Node {
			return graph.ConvertDType(graph.Softmax(graph.ConvertDType(x, f32), -1), bf16)
		}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := graph.NewGraph(embedded(), "audit")
			x := graph.Parameter(g, "x", shapes.Make(bf16, 8, 4))
			w := graph.Parameter(g, "w", shapes.Make(f32, 4, 4))
			findings := ograph.Audit(g, []*graph.Node{tc.fn(x, w)})
			for _, kind := range []ograph.FindingKind{ograph.Reduction16, ograph.UncastParameter, ograph.Float32Detour} {
				if got := ograph.CountFindings(findings, kind); got != tc.want[kind] {
					t.Errorf("%d findings of kind %q, want %d; all: %v", got, kind, tc.want[kind], findings)
				}
			}
		})
	}
}

// TestAuditMixedMLPStep: the tutorial MLP's forward and backward with float32 parameters and
// bfloat16 compute has no 16-bit reductions with onegpu's gradient rules, and has some with
// GoMLX's (the bias gradients).
func TestAuditMixedMLPStep(t *testing.T) {
	for _, stock := range []bool{false, true} {
		g := graph.NewGraph(embedded(), "mlp")
		if stock {
			ograph.UseStockGradients(g)
		}
		x := graph.Parameter(g, "x", shapes.Make(dtypes.Float32, tutorialmlp.Batch, tutorialmlp.Inputs))
		labels := graph.Parameter(g, "labels", shapes.Make(dtypes.Int32, tutorialmlp.Batch))
		var params []*graph.Node
		for i, s := range tutorialmlp.ParamShapes(dtypes.Float32) {
			params = append(params, graph.Parameter(g, tutorialmlp.ParamNames[i], s))
		}
		bf16 := dtypes.BFloat16
		loss := tutorialmlp.Loss(tutorialmlp.LogProbs(tutorialmlp.ParamsFromSlice(params), x, bf16, bf16), labels)
		outputs := append([]*graph.Node{loss}, graph.Gradient(loss, params...)...)
		findings := ograph.Audit(g, outputs)
		n := ograph.CountFindings(findings, ograph.Reduction16)
		t.Logf("stock=%v: %d findings: %v", stock, len(findings), findings)
		if !stock && n != 0 {
			t.Errorf("onegpu rules: %d 16-bit reductions, want 0", n)
		}
		if stock && n == 0 {
			t.Errorf("GoMLX rules: no 16-bit reductions found; the audit misses them")
		}
	}
}
