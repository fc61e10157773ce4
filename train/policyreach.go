package train

import (
	"fmt"
	"strings"

	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/ml/context"

	"github.com/onegpu/onegpu/analysis"
	"github.com/onegpu/onegpu/audit"
	"github.com/onegpu/onegpu/mixed"
)

// checkPolicyReaches refuses, before the first step, a mixed-precision run whose model computes
// with its variables in their stored dtype instead of the policy's compute dtype: GoMLX's own
// layers (layers.Dense, DenseWithBias, LayerNormalization, ...) compute in their input's dtype, so
// under a bfloat16 policy a float32 input is multiplied, biased and normalized in float32 and the
// run silently gets none of the policy's savings. It builds the model's forward pass (never run)
// in a throwaway context and audits it (mixed.Audit's graph.ComputeDType findings), naming each
// variable. A run whose compute dtype is its param dtype has nothing to check.
func (t *Trainer) checkPolicyReaches() error {
	policy := t.Config.Policy
	if policy.Compute == policy.Param {
		return nil
	}
	ctx := context.New()
	p, err := analysis.ContextProgram(t.Backend, ctx, "policy_audit", t.StepShapes(), func(ctx *context.Context, inputs []*graph.Node) []*graph.Node {
		t.Config.Settings().Apply(ctx, inputs[0].Graph())
		loss, _ := t.lossFn()(ctx, inputs)
		return []*graph.Node{loss.Sum}
	})
	if err != nil {
		return err
	}
	defer p.Graph.Finalize()
	var lines []string
	for _, f := range mixed.Audit(ctx, p.Graph, p.Outputs) {
		if f.Kind == audit.ComputeDType {
			lines = append(lines, f.Message)
		}
	}
	if len(lines) == 0 {
		return nil
	}
	if len(lines) > 8 {
		lines = append(lines[:8], fmt.Sprintf("and %d more", len(lines)-8))
	}
	return fmt.Errorf("the precision policy (Config.Policy %s) does not reach layers of the model, which compute with their variables "+
		"in the stored dtype; use onegpu's layers (layers.Dense, layers.LayerNorm, ...), which cast to the compute dtype, or a policy "+
		"whose compute dtype is the params':\n  %s", policy, strings.Join(lines, "\n  "))
}
