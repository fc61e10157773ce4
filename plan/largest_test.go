package plan_test

import (
	"math"
	"math/bits"
	"strings"
	"testing"

	"github.com/onegpu/onegpu/internal/testkit"
	"github.com/onegpu/onegpu/models"
	"github.com/onegpu/onegpu/plan"
	"github.com/onegpu/onegpu/recipes"
)

// TestLargestEstimateIsAffine: the sequential estimate of ScaledGPT's step is affine in the
// number of layers, which lets LargestThatFits estimate any depth from a one- and a two-layer
// build: for both sets of options and both leanest variants, 4 layers and the tutorial's 12 give
// m(1) + (L-1)·(m(2) - m(1)) to the byte.
func TestLargestEstimateIsAffine(t *testing.T) {
	backend := testkit.Embedded()
	base, err := recipes.Defaults("gpt", "tutorial")
	if err != nil {
		t.Fatal(err)
	}
	for _, opts := range []plan.StateOptions{plan.TutorialTechniques, plan.StateTechniques} {
		for _, v := range []plan.Variant{{Compute: "bfloat16", Remat: "block", MicroBatches: 4}, {Compute: "bfloat16", Remat: "block", MicroBatches: 1}} {
			for _, n := range []int{2, 8} {
				memory := func(layers int) int64 {
					gpt := plan.ScaledGPT(n)
					gpt.Layers = layers
					c := base
					c.Model = models.GPT{Config: gpt}
					c, err := opts.Apply(c)
					if err != nil {
						t.Fatal(err)
					}
					config, err := v.Apply(c)
					if err != nil {
						t.Fatal(err)
					}
					e, err := plan.EstimateStep(backend, config, false)
					if err != nil {
						t.Fatal(err)
					}
					return e.Memory()
				}
				one, two := memory(1), memory(2)
				for _, layers := range []int{4, 12} {
					if got, want := memory(layers), one+int64(layers-1)*(two-one); got != want {
						t.Errorf("%s, %s, hidden %d, %d layers: %d bytes, the affine rule gives %d", opts.Name, v, 128*n, layers, got, want)
					}
				}
			}
		}
	}
}

// TestLargestThatFits: the search answers what the exhaustive search (every size built in full,
// onegpu at 617c0ec: `plan --largest --budget 4GiB` and `64GiB`) answered, estimating about
// 2·log2(n) sizes for an answer of scale n, whatever the budget; the model one size larger does
// not fit (checked with EstimateStep of the whole model); 8-bit Adam with the optimizer
// offloaded fits at least as large a model.
func TestLargestThatFits(t *testing.T) {
	backend := testkit.Embedded()
	base, err := recipes.Defaults("gpt", "tutorial")
	if err != nil {
		t.Fatal(err)
	}
	ask := func(opts plan.StateOptions, budget int64) plan.Largest {
		row, err := plan.LargestThatFits(backend, base, budget, opts, false, nil)
		if err != nil {
			t.Fatal(err)
		}
		if !row.Fits || row.Memory > budget {
			t.Fatalf("%s: %+v does not fit %d bytes", opts.Name, row, budget)
		}
		if n := row.Hidden / 128; row.Evaluations > 2*bits.Len(uint(n))+1 {
			t.Errorf("%s, budget %d: %d sizes estimated for an answer of scale %d, want at most %d", opts.Name, budget, row.Evaluations, n, 2*bits.Len(uint(n))+1)
		}
		return row
	}
	for _, c := range []struct {
		budget           int64
		layers, hidden   [2]int
		memoryGiBTimes10 [2]int64
	}{
		{4 << 30, [2]int{12, 14}, [2]int{1024, 1152}, [2]int64{38, 36}},
		{64 << 30, [2]int{33, 48}, [2]int{2816, 4096}, [2]int64{577, 633}},
	} {
		for i, opts := range []plan.StateOptions{plan.TutorialTechniques, plan.StateTechniques} {
			row := ask(opts, c.budget)
			if row.Layers != c.layers[i] || row.Hidden != c.hidden[i] || row.Memory*10>>30 != c.memoryGiBTimes10[i] {
				t.Errorf("%s, budget %d GiB: %d layers × %d in %.2f GiB, the exhaustive search found %d × %d in %.1f GiB",
					opts.Name, c.budget>>30, row.Layers, row.Hidden, float64(row.Memory)/(1<<30), c.layers[i], c.hidden[i], float64(c.memoryGiBTimes10[i])/10)
			}
		}
	}

	const budget = 1 << 30
	tutorial, state := ask(plan.TutorialTechniques, budget), ask(plan.StateTechniques, budget)
	next := plan.ScaledGPT(tutorial.Hidden/128 + 1)
	for _, v := range []plan.Variant{{Compute: "bfloat16", Remat: "block", MicroBatches: 4}, {Compute: "bfloat16", Remat: "block", MicroBatches: 1}} {
		c := base
		c.Model = models.GPT{Config: next}
		config, err := v.Apply(c)
		if err != nil {
			t.Fatal(err)
		}
		if config, err = plan.TutorialTechniques.Apply(config); err != nil {
			t.Fatal(err)
		}
		e, err := plan.EstimateStep(backend, config, false)
		if err != nil {
			t.Fatal(err)
		}
		if e.Memory() <= budget {
			t.Errorf("%d layers × %d with %s fits (%d bytes), yet the search stopped below it", next.Layers, next.Hidden, v, e.Memory())
		}
	}
	// At this size activations dominate: the same model may be the largest either way, but then
	// with less device memory.
	if state.Params < tutorial.Params || (state.Params == tutorial.Params && state.Memory >= tutorial.Memory) {
		t.Errorf("8-bit Adam + offload: %d parameters in %d bytes, against the tutorial techniques' %d in %d",
			state.Params, state.Memory, tutorial.Params, tutorial.Memory)
	}
}

// TestLargestUnbounded: a budget that fits the largest model onegpu builds (8 EiB) is answered
// "unbounded", after a logarithmic number of estimates, not searched past it.
func TestLargestUnbounded(t *testing.T) {
	base, err := recipes.Defaults("gpt", "tutorial")
	if err != nil {
		t.Fatal(err)
	}
	row, err := plan.LargestThatFits(testkit.Embedded(), base, math.MaxInt64, plan.TutorialTechniques, false, nil)
	if err == nil || !strings.Contains(err.Error(), "unbounded") {
		t.Fatalf("an 8 EiB budget: %+v, %v; want an error saying it is unbounded", row, err)
	}
	if top := plan.MaxScale(); row.Evaluations > 2*bits.Len(uint(top))+1 || plan.ScaledGPT(top+1).Validate() == nil || plan.ScaledGPT(top).Validate() != nil {
		t.Errorf("%d sizes estimated; MaxScale %d", row.Evaluations, top)
	}
}

// TestSearchStateClimbsTheLadder: on a budget just under what Adam on the device needs at the
// least, the search answers with 8-bit Adam; just under that rung's least, with the optimizer
// offloaded; and each answer fits.
func TestSearchStateClimbsTheLadder(t *testing.T) {
	backend := testkit.Embedded()
	base, err := recipes.Defaults("gpt", "tiny")
	if err != nil {
		t.Fatal(err)
	}
	base.Batch, base.MicroBatches = 2, 1 // a grid of 20 variants
	least := func(rows []plan.Candidate) int64 {
		m := rows[0].Memory()
		for _, r := range rows {
			m = min(m, r.Memory())
		}
		return m
	}
	budget := int64(1 << 40)
	for rung := 1; rung < len(plan.StateLadder); rung++ {
		below := plan.StateLadder[rung-1]
		c, err := below.Apply(base)
		if err != nil {
			t.Fatal(err)
		}
		rows, err := plan.Search(backend, c, budget, plan.A5000, false)
		if err != nil {
			t.Fatal(err)
		}
		budget = least(rows) - 1
		rows, got, err := plan.SearchState(backend, base, budget, plan.A5000, false)
		if err != nil {
			t.Fatal(err)
		}
		best := plan.Fastest(rows)
		if got != plan.StateLadder[rung] || best < 0 || rows[best].Memory() > budget {
			t.Errorf("budget %d (just under %s's least): answered %s with best %d, want %s fitting", budget, below.Name, got.Name, best, plan.StateLadder[rung].Name)
		}
	}
}
