package mixed

import (
	"fmt"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/ml/context"

	"github.com/onegpu/onegpu/audit"
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
//
// A context restored from a GoMLX checkpoint holds the policy as its JSON decoding: the string
// Policy.MarshalText wrote, or, from checkpoints written before Policy had it, a
// map[string]any of its three dtype names. PolicyOf reads both back; anything else panics with
// what it found.
func PolicyOf(ctx *context.Context) Policy {
	value, found := ctx.GetParam(policyParam)
	if !found || value == nil {
		return Float32
	}
	p, err := policyFromParam(value)
	if err != nil {
		panicf("mixed.PolicyOf(scope %q): %v", ctx.Scope(), err)
	}
	return p
}

// policyFromParam converts what a context holds for policyParam into a Policy.
func policyFromParam(value any) (Policy, error) {
	switch v := value.(type) {
	case Policy:
		return v, nil
	case string:
		return ParsePolicy(v)
	case map[string]any: // the struct's JSON: {"Param": "Float32", "Compute": "BFloat16", "Output": "Float32"}
		var p Policy
		for _, f := range []struct {
			key string
			dst *dtypes.DType
		}{{"Param", &p.Param}, {"Compute", &p.Compute}, {"Output", &p.Output}} {
			name, ok := v[f.key].(string)
			if !ok {
				return Policy{}, fmt.Errorf("policy %v restored from a checkpoint has no dtype name %q", v, f.key)
			}
			d, err := dtypes.DTypeString(name)
			if err != nil {
				return Policy{}, fmt.Errorf("policy %v restored from a checkpoint: %s: %w", v, f.key, err)
			}
			*f.dst = d
		}
		return p, p.Validate(nil)
	default:
		return Policy{}, fmt.Errorf("the context's policy is a %T (%v), not a mixed.Policy", value, value)
	}
}

// AuditVariables reports every trainable variable of ctx whose dtype is not the param dtype of
// the policy set on its scope (see SetPolicy): a parameter created by a layer that ignores the
// policy (GoMLX's own layers create them in their input's dtype, so a bfloat16 input makes bfloat16
// parameters) is updated in 16 bits and loses small updates.
func AuditVariables(ctx *context.Context) []audit.Finding {
	return audit.Variables(ctx, func(v *context.Variable) dtypes.DType {
		return PolicyOf(ctx.InAbsPath(v.Scope())).Param
	})
}

// Audit is audit.Graph (16-bit reductions, uncast float32 weights, float32 detours) with the
// check that needs the policies set on ctx: matmuls that multiply a variable in a dtype other
// than the compute dtype of its scope's policy (graph.ComputeDType), which is what a layer that
// ignores the policy does: GoMLX's own layers.Dense on a float32 input computes in float32 under
// a bfloat16 policy, silently. ctx is the context the graph was built from.
//
//	p, _ := trainer.Program()
//	for _, g := range audit.GroupFindings(mixed.Audit(ctx, p.Graph, p.Outputs)) { fmt.Println(g) }
func Audit(ctx *context.Context, g *graph.Graph, outputs []*graph.Node) []audit.Finding {
	findings := audit.Graph(g, outputs)
	return append(findings, audit.ComputeDTypes(g, outputs, func(scope string) dtypes.DType {
		return PolicyOf(ctx.InAbsPath(scope)).Compute
	})...)
}
