package analysis

import (
	"github.com/gomlx/gomlx/pkg/ml/context"
)

// Role is what a variable of a training context holds. The parts of onegpu that treat variables
// differently — the optimizer (what it updates), SPMD sharding (what it splits across devices),
// memory accounting (what it reports as weights or optimizer state) and a checkpoint's resume
// check (which differences name the model) — all ask VariableRole, the one place that tells them
// apart.
type Role int

const (
	// RoleTrainable is a trainable weight: the optimizer updates it from its gradient.
	RoleTrainable Role = iota
	// RoleFrozen is a frozen weight: part of the model, read by its forward pass and never
	// changed by training (the base of an adapter, in any dtype: float, or quantized codes such
	// as NF4's stored as uint8). FreezeVariable marks it.
	RoleFrozen
	// RoleOptimizerState is the optimizer's per-parameter state: Adam's moments, 8-bit codes and
	// their scales, Adafactor's factored moments (any non-scalar variable that is neither a weight
	// nor the random state).
	RoleOptimizerState
	// RoleOther is the rest of a training context: scalars (step counters, the loss scale, the
	// learning rate, the moving-average loss) and the random state.
	RoleOther
)

var roleNames = [...]string{"trainable weight", "frozen weight", "optimizer state", "other"}

// String names the role ("frozen weight").
func (r Role) String() string { return roleNames[r] }

// frozenParamPrefix prefixes the root-scope context parameter that marks a frozen variable, named
// by its scope and name: GoMLX's Variable holds no metadata of its own, and a parameter of the
// root scope is found by its full name alone (a parameter of the variable's scope would be
// inherited by its sub-scopes' variables of the same name).
const frozenParamPrefix = "onegpu_frozen_weight:"

// FreezeVariable marks v, a variable of ctx, as a frozen weight (RoleFrozen) and returns it: it is
// not trainable, and it is a weight, not optimizer state, whatever its dtype. Call it where the
// model creates the variable, on every build, as one calls SetTrainable: the mark lives in the
// context the model is built in (a context parameter of the root scope).
func FreezeVariable(ctx *context.Context, v *context.Variable) *context.Variable {
	v.SetTrainable(false)
	ctx.InAbsPath(context.RootScope).SetParam(frozenParamPrefix+v.ScopeAndName(), true)
	return v
}

// IsFrozen reports whether FreezeVariable marked v in ctx.
func IsFrozen(ctx *context.Context, v *context.Variable) bool {
	marked, found := ctx.InAbsPath(context.RootScope).GetParam(frozenParamPrefix + v.ScopeAndName())
	frozen, _ := marked.(bool)
	return found && frozen
}

// VariableRole returns v's role in ctx: trainable (v.Trainable), frozen (FreezeVariable), the
// random state and scalars (RoleOther), or, for any other non-trainable variable, optimizer
// state.
func VariableRole(ctx *context.Context, v *context.Variable) Role {
	switch {
	case v.Trainable:
		return RoleTrainable
	case IsFrozen(ctx, v):
		return RoleFrozen
	case v.Shape().Rank() == 0 || v.Name() == context.RNGStateVariableName:
		return RoleOther
	}
	return RoleOptimizerState
}

// IsWeight reports whether v is one of the model's weights, trainable or frozen.
func IsWeight(ctx *context.Context, v *context.Variable) bool {
	r := VariableRole(ctx, v)
	return r == RoleTrainable || r == RoleFrozen
}
