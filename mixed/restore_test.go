package mixed_test

import (
	"testing"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/ml/context"

	"github.com/onegpu/onegpu/internal/testkit"
	"github.com/onegpu/onegpu/mixed"
)

// TestPolicyOfRestoredContext: a policy set on a context survives a GoMLX checkpoint (which saves
// context parameters as JSON): PolicyOf of the restored context returns it, where it panicked
// when the policy came back as a map. The map form of checkpoints written before is read too.
func TestPolicyOfRestoredContext(t *testing.T) {
	want := mixed.Policy{Param: dtypes.Float32, Compute: dtypes.BFloat16, Output: dtypes.Float32}
	ctx := context.New()
	mixed.SetPolicy(ctx.In("model"), want)
	ctx.VariableWithValue("w", []float32{1, 2})
	restored := testkit.RoundTrip(t, ctx)
	raw, _ := restored.In("model").GetParam("mixed_policy")
	t.Logf("restored policy parameter: %T %v", raw, raw)
	if got := mixed.PolicyOf(restored.In("model").In("dense")); got != want {
		t.Errorf("PolicyOf(restored context) = %s, want %s", got, want)
	}
	if got := mixed.PolicyOf(restored); got != mixed.Float32 {
		t.Errorf("PolicyOf(restored root, where no policy was set) = %s, want float32", got)
	}

	// A checkpoint written before Policy marshalled as text holds the struct's JSON object.
	old := context.New()
	old.SetParam("mixed_policy", map[string]any{"Param": "Float32", "Compute": "BFloat16", "Output": "Float32"})
	if got := mixed.PolicyOf(old); got != want {
		t.Errorf("PolicyOf(policy as a JSON object) = %s, want %s", got, want)
	}
	old.SetParam("mixed_policy", map[string]any{"Param": "Float32"})
	testkit.MustPanic(t, "no dtype name", func() { mixed.PolicyOf(old) })
}
