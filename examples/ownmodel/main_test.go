package main

import (
	"testing"

	"github.com/onegpu/onegpu/internal/testkit"
)

// TestOwnModel runs the example as `go run ./examples/ownmodel --json` does and checks what the
// issue asks of it: the loss halves, remat and micro-batches leave the gradients as they were, a
// NaN batch changes nothing and leaves the metrics finite, the parameters stay float32.
func TestOwnModel(t *testing.T) {
	r, err := measure(testkit.Embedded(), 60, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%+v", *r)
	if !(r.LastLoss < r.FirstLoss/2) {
		t.Errorf("loss %g -> %g: did not halve", r.FirstLoss, r.LastLoss)
	}
	if r.RematGradMaxAbsDiff != 0 || r.RematBlocks == 0 {
		t.Errorf("remat: gradients differ by %g with %d checkpointed blocks; want 0 with some", r.RematGradMaxAbsDiff, r.RematBlocks)
	}
	if !(r.AccumGradMaxRelDiff <= 1e-6) {
		t.Errorf("4 vs 1 micro-batches: relative difference %g, want <= 1e-6", r.AccumGradMaxRelDiff)
	}
	if r.NaNStepParamsChanged != 0 || !r.MetricsFiniteAfterSkip {
		t.Errorf("NaN step: %d variables changed, metrics finite after it: %v", r.NaNStepParamsChanged, r.MetricsFiniteAfterSkip)
	}
	if len(r.ParamDTypes) != 1 || r.ParamDTypes[0] != "float32" {
		t.Errorf("parameter dtypes %v, want [float32]", r.ParamDTypes)
	}
}
