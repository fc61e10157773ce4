package layers

import (
	"fmt"
	"math"
	"strings"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/gomlx/gomlx/pkg/ml/context"

	"github.com/onegpu/onegpu/exact"
)

// ParamSeed is the context hyperparameter (an int64) the random initial values of onegpu's layers
// are drawn with: GoMLX's context.ParamInitialSeed. train.Trainer sets it to
// its config's seed. Unset, the seed is 0: initial weights are always reproducible.
const ParamSeed = "initializers_seed"

// NormalVariable returns the variable name in ctx's scope, created with the given shape when it
// does not exist yet and initialized from a normal distribution with mean 0 and standard
// deviation std. The values are a function of the seed (ParamSeed), the variable's scope and
// name, and its shape only (exact.RandomNormal keyed by exact.RandomKey): the same bits on the
// embedded backend and on XLA, whatever other variables the model creates and in whatever order,
// and independent of GoMLX's random state (which dropout uses). It panics for a std that is not
// positive and finite.
func NormalVariable(ctx *context.Context, name string, shape shapes.Shape, std float64) *context.Variable {
	if !(std > 0) || math.IsInf(std, 0) {
		panic(fmt.Sprintf("layers.NormalVariable(%q): standard deviation %g must be positive and finite", name, std))
	}
	path := strings.TrimSuffix(ctx.Scope(), context.ScopeSeparator) + context.ScopeSeparator + name
	return ctx.WithInitializer(func(g *graph.Graph, s shapes.Shape) *graph.Node {
		return exact.RandomNormal(g, exact.RandomKey(seedOf(ctx), path, s.Dimensions), s, std)
	}).VariableWithShape(name, shape)
}

// UniformVariable is NormalVariable for a uniform distribution on [-bound, bound): the same
// values on every backend, a function of the seed, the variable's path and shape. A value is
// bound·(2u - 1) with u = (53 random bits)·2^-53, rounded once to the variable's dtype (through
// float32 for a 16-bit one, rounded to nearest). It panics for a bound that is not positive and
// finite.
func UniformVariable(ctx *context.Context, name string, shape shapes.Shape, bound float64) *context.Variable {
	if !(bound > 0) || math.IsInf(bound, 0) {
		panic(fmt.Sprintf("layers.UniformVariable(%q): bound %g must be positive and finite", name, bound))
	}
	path := strings.TrimSuffix(ctx.Scope(), context.ScopeSeparator) + context.ScopeSeparator + name
	return ctx.WithInitializer(func(g *graph.Graph, s shapes.Shape) *graph.Node {
		bits := exact.RandomBits(g, exact.RandomKey(seedOf(ctx), path, s.Dimensions), s.Dimensions...)
		u := graph.ConvertDType(graph.Div(bits, graph.Const(g, uint64(1)<<11)), dtypes.Float64) // exact: 53 bits
		x := graph.MulScalar(graph.AddScalar(graph.MulScalar(u, math.Ldexp(2, -53)), -1), bound)
		if s.DType != dtypes.Float64 {
			x = graph.ConvertDType(x, dtypes.Float32)
		}
		return graph.ConvertDType(x, s.DType)
	}).VariableWithShape(name, shape)
}

// seedOf returns the context's ParamSeed, 0 when unset. A context restored from a checkpoint may
// hold it as another number type.
func seedOf(ctx *context.Context) uint64 {
	v, found := ctx.GetParam(ParamSeed)
	if !found || v == nil {
		return 0
	}
	switch s := v.(type) {
	case int64:
		return uint64(s)
	case int:
		return uint64(s)
	case uint64:
		return s
	case float64:
		if s == math.Trunc(s) {
			return uint64(int64(s))
		}
	}
	panic(fmt.Sprintf("layers: the context's %q parameter is %v (%T), not an integer seed", ParamSeed, v, v))
}
