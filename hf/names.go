package hf

import (
	"strings"

	"github.com/gomlx/gomlx/pkg/ml/context"
)

// TensorSpec is one tensor of a model as a Hugging Face checkpoint names it, with its shape.
type TensorSpec struct {
	Name  string // e.g. "model.layers.0.self_attn.q_proj.weight"
	Shape []int  // e.g. [heads·head_dim, hidden]: linear weights are [out_features, in_features]
}

// VariableOf maps a Hugging Face tensor name to the context scope and variable name that hold it,
// relative to ctx's scope: the dot-separated parts but the last are scopes, the last is the
// variable ("model.norm.weight" is the variable "weight" in scope ctx.In("model").In("norm")).
func VariableOf(ctx *context.Context, tensorName string) (scope *context.Context, variable string) {
	parts := strings.Split(tensorName, ".")
	scope = ctx
	for _, p := range parts[:len(parts)-1] {
		scope = scope.In(p)
	}
	return scope, parts[len(parts)-1]
}

// lookupVariable returns the variable holding tensorName under ctx, or nil.
func lookupVariable(ctx *context.Context, tensorName string) *context.Variable {
	scope, name := VariableOf(ctx, tensorName)
	return scope.GetVariableByScopeAndName(scope.Scope(), name)
}
