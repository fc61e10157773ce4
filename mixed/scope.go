package mixed

import (
	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/ml/context"

	ograph "github.com/onegpu/onegpu/graph"
)

// policyParam is the context hyperparameter that holds a scope's Policy.
const policyParam = "mixed_policy"

// Float32 is the policy of a model that does everything in float32: what PolicyOf returns where no
// policy was set.
var Float32 = Policy{Param: dtypes.Float32, Compute: dtypes.Float32, Output: dtypes.Float32}

// SetPolicy sets p as the policy of ctx's scope and every scope below it that does not set its
// own, like jmp's set_policy for a module class: onegpu's layers (package layers) create their
// parameters in p.Param and compute in p.Compute wherever they find it.
//
//	mixed.SetPolicy(ctx, mixed.Policy{Param: dtypes.Float32, Compute: dtypes.BFloat16, Output: dtypes.Float32})
//	mixed.SetPolicy(ctx.In("head"), mixed.Float32) // one part of the model stays in float32
func SetPolicy(ctx *context.Context, p Policy) { ctx.SetParam(policyParam, p) }

// PolicyOf returns the policy set on ctx's scope or the nearest scope above it, or Float32 when
// none was set.
func PolicyOf(ctx *context.Context) Policy {
	return context.GetParamOr(ctx, policyParam, Float32)
}

// AuditVariables reports every trainable variable of ctx whose dtype is not the param dtype of
// the policy set on its scope (see SetPolicy): a parameter created by a layer that ignores the
// policy (GoMLX's own layers create them in their input's dtype, so a bfloat16 input makes bfloat16
// parameters) is updated in 16 bits and loses small updates.
func AuditVariables(ctx *context.Context) []ograph.Finding {
	return ograph.AuditVariables(ctx, func(v *context.Variable) dtypes.DType {
		return PolicyOf(ctx.InAbsPath(v.Scope())).Param
	})
}
