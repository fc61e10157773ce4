package hostengine

import (
	"strings"
	"testing"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/gomlx/gomlx/pkg/ml/context"

	"github.com/onegpu/onegpu/internal/testkit"
	"github.com/onegpu/onegpu/optim"
)

// TestScaling: gradients of a loss scaled by 8, unscaled by the engine and clipped by 0.5, update
// as the plain gradients times 0.5 do (powers of two: every product is exact).
func TestScaling(t *testing.T) {
	backend := testkit.Embedded()
	run := func(scale, gradFactor float32, scaling Scaling) map[string]*tensors.Tensor {
		ctx := newTestContext()
		engine, err := New(Config{Backend: backend, Ctx: ctx, Optimizer: optim.Adam().Done(), Schedule: optim.Constant(1e-2)})
		if err != nil {
			t.Fatal(err)
		}
		defer engine.Close()
		stages := stagesOf(t, engine, ctx)
		for step := range 2 {
			grads := testGradients(ctx, step)
			for _, s := range stages {
				var gs []*tensors.Tensor
				for _, v := range s.Variables() {
					values := tensors.MustCopyFlatData[float32](grads[v])
					for i := range values {
						values[i] *= scale * gradFactor
					}
					gs = append(gs, tensors.FromFlatDataAndDimensions(values, v.Shape().Dimensions...))
				}
				if _, err := s.Update(gs, scaling); err != nil {
					t.Fatal(err)
				}
			}
			if err := engine.Commit(); err != nil {
				t.Fatal(err)
			}
		}
		return testkit.Variables(t, ctx)
	}
	got := run(8, 1, Scaling{LossScale: 8, Clip: 0.5})
	want := run(1, 0.5, Scaling{})
	for name, w := range want {
		assertSame(t, got[name], w)
	}
}

// TestParams: Params returns the parameters in the compute dtype (float32: copies of the masters,
// which the next update may overwrite).
func TestParams(t *testing.T) {
	backend := testkit.Embedded()
	for _, compute := range []dtypes.DType{dtypes.InvalidDType, dtypes.BFloat16} {
		ctx := newTestContext()
		engine, err := New(Config{Backend: backend, Ctx: ctx, Optimizer: optim.Adam().Done(), Compute: compute})
		if err != nil {
			t.Fatal(err)
		}
		stages := stagesOf(t, engine, ctx)
		params, err := stages[1].Params()
		if err != nil {
			t.Fatal(err)
		}
		for i, v := range stages[1].Variables() {
			want := testkit.Floats(v.MustValue())
			got := testkit.Floats(params[i])
			wantDType := compute
			if compute == dtypes.InvalidDType {
				wantDType = dtypes.Float32
			}
			if params[i].DType() != wantDType {
				t.Errorf("%s: %s, want %s", v.ScopeAndName(), params[i].DType(), wantDType)
			}
			for j := range want {
				if rel := (got[j] - want[j]) / want[j]; rel > 1.0/256 || rel < -1.0/256 {
					t.Fatalf("%s[%d] = %g, want %g", v.ScopeAndName(), j, got[j], want[j])
				}
			}
		}
		engine.Close()
	}
}

// TestRefusals: what cannot work is an error naming it.
func TestRefusals(t *testing.T) {
	backend := testkit.Embedded()
	ctx := newTestContext()
	if _, err := New(Config{Backend: backend, Ctx: ctx}); err == nil || !strings.Contains(err.Error(), "no optimizer") {
		t.Errorf("no optimizer: %v", err)
	}
	if _, err := New(Config{Backend: backend, Ctx: ctx, Optimizer: optim.Adam().Done(), Compute: dtypes.Int32}); err == nil ||
		!strings.Contains(err.Error(), "int32") && !strings.Contains(err.Error(), "Int32") {
		t.Errorf("int32 compute: %v", err)
	}
	engine, err := New(Config{Backend: backend, Ctx: ctx, Optimizer: optim.Adam().Done()})
	if err != nil {
		t.Fatal(err)
	}
	defer engine.Close()
	stages := stagesOf(t, engine, ctx)
	if _, err := engine.Stage("again", stages[0].Variables()); err == nil || !strings.Contains(err.Error(), "each variable belongs to one stage") {
		t.Errorf("a variable in two stages: %v", err)
	}
	other := context.New().InAbsPath("/x").VariableWithValue("w", []float32{1})
	if _, err := engine.Stage("foreign", []*context.Variable{other}); err == nil || !strings.Contains(err.Error(), "not in the engine's context") {
		t.Errorf("a variable of another context: %v", err)
	}
	bad := []*tensors.Tensor{tensors.FromValue([]float32{1, 2}), tensors.FromValue([]float32{1})}
	if _, err := stages[0].Update(bad, Scaling{}); err == nil || !strings.Contains(err.Error(), "gradient #0 of /block_0/dense/kernel") {
		t.Errorf("a gradient of the wrong shape: %v", err)
	}
}
