package testkit

import (
	"testing"

	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/gomlx/gomlx/pkg/ml/context"
	"github.com/gomlx/gomlx/pkg/ml/context/checkpoints"
)

// RoundTrip saves ctx with GoMLX's checkpoints in a temporary folder and returns a new context
// loaded from it: its parameters come back through JSON, as they do for a resumed run.
func RoundTrip(t testing.TB, ctx *context.Context) *context.Context {
	t.Helper()
	dir := t.TempDir()
	saver, err := checkpoints.Build(ctx).Dir(dir).Done()
	if err != nil {
		t.Fatal(err)
	}
	if err := saver.Save(); err != nil {
		t.Fatal(err)
	}
	restored := context.New()
	if _, err := checkpoints.Build(restored).Dir(dir).Done(); err != nil {
		t.Fatal(err)
	}
	return restored
}

// Variables copies every variable's whole value (shards merged) of ctx to the host, by scope and
// name.
func Variables(t testing.TB, ctx *context.Context) map[string]*tensors.Tensor {
	t.Helper()
	out := map[string]*tensors.Tensor{}
	for v := range ctx.IterVariables() {
		value, err := v.Value()
		if err != nil {
			t.Fatal(err)
		}
		if out[v.ScopeAndName()], err = value.LocalClone(); err != nil {
			t.Fatal(err)
		}
	}
	return out
}
