package audit_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/gomlx/gomlx/pkg/ml/context"

	"github.com/onegpu/onegpu/analysis"
	"github.com/onegpu/onegpu/audit"
	"github.com/onegpu/onegpu/exact"
	"github.com/onegpu/onegpu/internal/panics"
	"github.com/onegpu/onegpu/internal/tutorialmlp"
	"github.com/onegpu/onegpu/vjp"
)

func TestAudit(t *testing.T) {
	bf16, f32 := dtypes.BFloat16, dtypes.Float32
	for _, tc := range []struct {
		name string
		fn   func(x, w *graph.Node) *graph.Node // x: bfloat16 [8, 4]; w: float32 parameter [4, 4]
		want map[audit.FindingKind]int
	}{
		{"clean: cast weight, sum in float32", func(x, w *graph.Node) *graph.Node {
			return exact.SumInFloat32(graph.Dot(x, graph.ConvertDType(w, bf16)))
		}, nil},
		{"bfloat16 ReduceSum", func(x, w *graph.Node) *graph.Node {
			return graph.ReduceAllSum(graph.Dot(x, graph.ConvertDType(w, bf16)))
		}, map[audit.FindingKind]int{audit.Reduction16: 1}},
		{"uncast parameter", func(x, w *graph.Node) *graph.Node {
			return graph.ConvertDType(graph.Dot(graph.ConvertDType(x, f32), w), bf16)
		}, map[audit.FindingKind]int{audit.UncastParameter: 1}},
		{"float32 detour", func(x, w *graph.Node) *graph.Node {
			half := graph.Const(x.Graph(), float32(0.5))
			return graph.ConvertDType(graph.Mul(graph.ConvertDType(x, f32), half), bf16)
		}, map[audit.FindingKind]int{audit.Float32Detour: 1}},
		{"float32 island with a reduction is fine", func(x, w *graph.Node) *graph.Node {
			return graph.ConvertDType(graph.Softmax(graph.ConvertDType(x, f32), -1), bf16)
		}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := graph.NewGraph(embedded(), "audit")
			x := graph.Parameter(g, "x", shapes.Make(bf16, 8, 4))
			w := graph.Parameter(g, "w", shapes.Make(f32, 4, 4))
			findings := audit.Graph(g, []*graph.Node{tc.fn(x, w)})
			for _, kind := range []audit.FindingKind{audit.Reduction16, audit.UncastParameter, audit.Float32Detour} {
				if got := audit.CountFindings(findings, kind); got != tc.want[kind] {
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
			vjp.UseStock(g)
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
		findings := audit.Graph(g, outputs)
		n := audit.CountFindings(findings, audit.Reduction16)
		t.Logf("stock=%v: %d findings: %v", stock, len(findings), findings)
		if !stock && n != 0 {
			t.Errorf("onegpu rules: %d 16-bit reductions, want 0", n)
		}
		if stock && n == 0 {
			t.Errorf("GoMLX rules: no 16-bit reductions found; the audit misses them")
		}
	}
}

// TestGroupFindings: the same problem in every block is one group that counts the blocks and
// says where they are ("/block_*/mlp"), not one finding per block; a different problem is
// another group.
func TestGroupFindings(t *testing.T) {
	const blocks = 5
	bf16, f32 := dtypes.BFloat16, dtypes.Float32
	p, err := analysis.ContextProgram(embedded(), context.New(), "blocks", []shapes.Shape{shapes.Make(bf16, 8, 4)},
		func(ctx *context.Context, inputs []*graph.Node) []*graph.Node {
			x := inputs[0]
			for i := range blocks {
				w := ctx.In(fmt.Sprintf("block_%d", i)).In("mlp").VariableWithShape("kernel", shapes.Make(f32, 4, 4)).ValueGraph(x.Graph())
				h := graph.Dot(x, graph.ConvertDType(w, bf16))
				half := graph.Const(x.Graph(), float32(0.5))
				x = graph.ConvertDType(graph.Mul(graph.ConvertDType(h, f32), half), bf16) // a float32 detour per block
			}
			return []*graph.Node{graph.ReduceAllSum(x)} // and one 16-bit reduction
		})
	if err != nil {
		t.Fatal(err)
	}
	findings := audit.Graph(p.Graph, p.Outputs)
	groups := audit.GroupFindings(findings)
	if len(findings) != blocks+1 || len(groups) != 2 {
		t.Fatalf("%d findings in %d groups, want %d in 2: %v", len(findings), len(groups), blocks+1, groups)
	}
	detours := groups[0]
	if detours.Kind != audit.Float32Detour || len(detours.Findings) != blocks || len(detours.Scopes) != blocks ||
		len(detours.Where) != 1 || detours.Where[0] != "/block_*/mlp" {
		t.Errorf("detour group %+v: want %d findings in %d scopes, all /block_*/mlp", detours, blocks, blocks)
	}
	if got, want := detours.String(), "float32 detour ×5, in /block_*/mlp (5 scopes): a 16-bit value"; !strings.HasPrefix(got, want) {
		t.Errorf("group line %q, want it to start with %q", got, want)
	}
	if groups[1].Kind != audit.Reduction16 || len(groups[1].Findings) != 1 {
		t.Errorf("second group %+v: want the one 16-bit reduction", groups[1])
	}
}

// TestAuditVariablesFindingPrints: a finding about a variable has no node; printing it names the
// variable's scope instead of panicking (it dereferenced the nil node).
func TestAuditVariablesFindingPrints(t *testing.T) {
	ctx := context.New()
	ctx.In("block_0").In("mlp").VariableWithValue("kernel", []float32{1, 2})
	findings := audit.Variables(ctx, func(*context.Variable) dtypes.DType { return dtypes.BFloat16 })
	if len(findings) != 1 {
		t.Fatalf("findings %v, want one about the float32 kernel", findings)
	}
	var line string
	if err := panics.Catch(func() { line = findings[0].String() }); err != nil {
		t.Fatalf("printing the finding panicked: %v", err)
	}
	if !strings.Contains(line, "/block_0/mlp") || !strings.HasPrefix(line, string(audit.ParamDType)) {
		t.Errorf("finding printed as %q, want its kind and scope", line)
	}
	if groups := audit.GroupFindings(findings); len(groups) != 1 || !strings.Contains(groups[0].String(), "/block_0/mlp") {
		t.Errorf("grouped: %v, want one group in /block_0/mlp", groups)
	}
}

// TestAuditDataIsNotAWeight: in a graph with context variables, a float32 data input (the targets
// a float32 loss compares the model's output with) is not an uncast weight; a float32 variable
// meeting an upcast value is.
func TestAuditDataIsNotAWeight(t *testing.T) {
	bf16, f32 := dtypes.BFloat16, dtypes.Float32
	p, err := analysis.ContextProgram(embedded(), context.New(), "loss", []shapes.Shape{shapes.Make(bf16, 8, 4), shapes.Make(f32, 8, 4)},
		func(ctx *context.Context, in []*graph.Node) []*graph.Node {
			w := ctx.VariableWithShape("w", shapes.Make(f32, 4, 4)).ValueGraph(in[0].Graph())
			y := graph.Dot(in[0], graph.ConvertDType(w, bf16))                                     // the model, in bfloat16
			loss := graph.ReduceAllSum(graph.Square(graph.Sub(graph.ConvertDType(y, f32), in[1]))) // a float32 loss against float32 targets
			gain := ctx.VariableWithShape("gain", shapes.Make(f32, 8, 4)).ValueGraph(in[0].Graph())
			uncast := graph.ConvertDType(graph.Mul(graph.ConvertDType(y, f32), gain), bf16) // a float32 weight in a bfloat16 region
			return []*graph.Node{loss, uncast}
		})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Graph.Finalize()
	findings := audit.Graph(p.Graph, p.Outputs)
	if n := audit.CountFindings(findings, audit.UncastParameter); n != 1 {
		t.Errorf("%d uncast-parameter findings, want 1 (the weight, not the targets): %v", n, findings)
	}
}
