package plan_test

import (
	"testing"

	"github.com/onegpu/onegpu/internal/testkit"
	"github.com/onegpu/onegpu/models"
	"github.com/onegpu/onegpu/plan"
	"github.com/onegpu/onegpu/recipes"
)

// TestScaledLlama: scale 16 is Llama-3.2-1B, every scale up to the family's largest is a valid
// Llama, and the family's largest is the last one onegpu builds.
func TestScaledLlama(t *testing.T) {
	c := plan.ScaledLlama(16, 2048)
	if p := models.LlamaPresets["llama-3.2-1b"]; !p.SameModel(c) || c.Params() != 1235814400 {
		t.Errorf("ScaledLlama(16) = %+v (%d params), want Llama-3.2-1B's shape", c, c.Params())
	}
	family := plan.ScaledLlamas(2048)
	for _, n := range []int{1, 2, 3, 25, family.Max} {
		if err := plan.ScaledLlama(n, 2048).Validate(); err != nil {
			t.Errorf("n = %d: %v", n, err)
		}
	}
	if plan.ScaledLlama(family.Max+1, 2048).Validate() == nil {
		t.Errorf("ScaledLlamas' Max %d is not the largest valid scale", family.Max)
	}
}

// TestLargestLlama: plan.LargestOf the Llama family answers the largest scale whose step fits,
// checked by estimating the answer and the next scale in full (every layer built), and the
// sequential estimate it extrapolates from one and two layers equals the full model's.
func TestLargestLlama(t *testing.T) {
	backend := testkit.Embedded()
	const seq = 64
	base, err := recipes.Defaults("llama", "llama-3.2-1b")
	if err != nil {
		t.Fatal(err)
	}
	family := plan.ScaledLlamas(seq)
	full := func(n int, v plan.Variant, opts plan.StateOptions) int64 {
		m, err := family.Model(n)
		if err != nil {
			t.Fatal(err)
		}
		c := base
		c.Model = m
		if c, err = opts.Apply(c); err != nil {
			t.Fatal(err)
		}
		if c, err = v.Apply(c); err != nil {
			t.Fatal(err)
		}
		e, err := plan.EstimateStep(backend, c, false)
		if err != nil {
			t.Fatal(err)
		}
		return e.Memory()
	}
	const budget = 3 << 30
	row, err := plan.LargestOf(backend, base, family, budget, plan.StateTechniques, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("largest at 3 GiB, sequence %d: %s (%d params, %d bytes, %s), %d sizes estimated", seq, row.Model, row.Params, row.Memory, row.Variant, row.Evaluations)
	n := row.Hidden / 128
	if !row.Fits || n < 2 {
		t.Fatalf("row %+v: want a model of at least 2 layers", row)
	}
	if got := full(n, row.Variant, plan.StateTechniques); got != row.Memory || got > budget {
		t.Errorf("scale %d built in full: %d bytes; the search's extrapolation said %d (budget %d)", n, got, row.Memory, int64(budget))
	}
	for _, v := range []plan.Variant{{Compute: "bfloat16", Remat: "block", MicroBatches: 4}, {Compute: "bfloat16", Remat: "block", MicroBatches: 1}} {
		if got := full(n+1, v, plan.StateTechniques); got <= budget {
			t.Errorf("scale %d fits with %s (%d bytes): the search stopped short", n+1, v, got)
		}
	}
}
