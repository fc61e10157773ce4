package layers_test

import (
	"testing"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/gomlx/gomlx/pkg/ml/context"

	"github.com/onegpu/onegpu/internal/testkit"
	"github.com/onegpu/onegpu/layers"
)

// initialized creates variables with create in a fresh context with the given seed (none when
// negative), initializes them on the embedded backend and returns the values of scope/name.
func initialized(t *testing.T, seed int64, create func(ctx *context.Context), scope, name string) []float64 {
	t.Helper()
	ctx := context.New()
	if seed >= 0 {
		ctx.SetParam(layers.ParamSeed, seed)
	}
	create(ctx)
	if err := ctx.InitializeVariables(testkit.Embedded(), nil); err != nil {
		t.Fatal(err)
	}
	v := ctx.GetVariableByScopeAndName(scope, name)
	if v == nil {
		t.Fatalf("no variable %s/%s", scope, name)
	}
	return testkit.Floats(v.MustValue())
}

// TestNormalVariableIsAFunctionOfSeedNameAndShape: a variable's initial values do not depend on
// the variables created before it or on GoMLX's random state; they change with the seed, the
// scope, the name and the shape; no seed is seed 0. ParamSeed is GoMLX's context.ParamInitialSeed.
func TestNormalVariableIsAFunctionOfSeedNameAndShape(t *testing.T) {
	if layers.ParamSeed != context.ParamInitialSeed {
		t.Fatalf("layers.ParamSeed %q is not GoMLX's %q", layers.ParamSeed, context.ParamInitialSeed)
	}
	kernel := func(dims ...int) func(ctx *context.Context) {
		return func(ctx *context.Context) {
			layers.NormalVariable(ctx.In("dense"), "kernel", shapes.Make(dtypes.Float32, dims...), 0.1)
		}
	}
	alone := initialized(t, 5, kernel(8, 16), "/dense", "kernel")
	afterOthers := initialized(t, 5, func(ctx *context.Context) {
		if err := ctx.SetRNGStateFromSeed(99); err != nil {
			t.Fatal(err)
		}
		layers.NormalVariable(ctx.In("other"), "kernel", shapes.Make(dtypes.Float32, 100), 1)
		ctx.RandomNormal(graph.NewGraph(testkit.Embedded(), "draw"), shapes.Make(dtypes.Float32, 3))
		kernel(8, 16)(ctx)
	}, "/dense", "kernel")
	if !equal(alone, afterOthers) {
		t.Errorf("the kernel's values changed when other variables and random numbers came first")
	}
	for what, values := range map[string][]float64{
		"seed":  initialized(t, 6, kernel(8, 16), "/dense", "kernel"),
		"shape": initialized(t, 5, kernel(16, 8), "/dense", "kernel"),
		"scope": initialized(t, 5, func(ctx *context.Context) {
			layers.NormalVariable(ctx.In("dense2"), "kernel", shapes.Make(dtypes.Float32, 8, 16), 0.1)
		}, "/dense2", "kernel"),
	} {
		if equal(alone, values) {
			t.Errorf("another %s gave the same values", what)
		}
	}
	if !equal(initialized(t, -1, kernel(8, 16), "/dense", "kernel"), initialized(t, 0, kernel(8, 16), "/dense", "kernel")) {
		t.Errorf("no seed is not seed 0")
	}
	testkit.MustPanic(t, "standard deviation", func() {
		layers.NormalVariable(context.New(), "w", shapes.Make(dtypes.Float32, 2), 0)
	})
}

func equal(a, b []float64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
