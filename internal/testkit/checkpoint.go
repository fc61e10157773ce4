package testkit

import (
	"testing"

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
