package audit

import (
	"fmt"
	"strings"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/ml/context"
)

// ParamDType is a trainable variable whose dtype is not the param dtype its precision policy
// asks for (see Variables).
const ParamDType FindingKind = "parameter dtype"

// Variables reports the trainable variables of ctx whose dtype differs from want(v), the
// param dtype the model's precision policy gives the variable's scope (onegpu's mixed.AuditVariables
// passes it). The findings have no Node (they are about state, not an op); their Scope is the
// variable's.
func Variables(ctx *context.Context, want func(v *context.Variable) dtypes.DType) []Finding {
	var findings []Finding
	for v := range ctx.IterVariables() {
		if !v.Trainable {
			continue
		}
		if w := want(v); w != dtypes.InvalidDType && v.DType() != w {
			findings = append(findings, Finding{Kind: ParamDType, Scope: v.Scope(), Message: fmt.Sprintf(
				"trainable variable %s is %s but the policy's param dtype is %s: create it in %s and cast it to the "+
					"compute dtype where it is used (onegpu's layers do)", v.ScopeAndName(), lower(v.DType()), lower(w), lower(w))})
		}
	}
	return findings
}

// lower names a dtype the way policies spell it: bfloat16, float32.
func lower(d dtypes.DType) string { return strings.ToLower(d.String()) }
