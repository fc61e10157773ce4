package plan_test

import (
	"testing"

	"github.com/onegpu/onegpu/internal/testkit"
	"github.com/onegpu/onegpu/plan"
	"github.com/onegpu/onegpu/train"
)

// TestLargestThatFits: on a 1 GiB budget the search answers a scaled GPT whose step fits while
// the next size's does not (checked with EstimateStep directly), and with 8-bit Adam and the
// optimizer offloaded at least as large a model in less memory. (The 24 GiB headline, 2x the
// parameters, is measured by `onegpu plan --budget 24GiB --largest`: minutes of estimates.)
func TestLargestThatFits(t *testing.T) {
	backend := testkit.Embedded()
	base, err := plan.Defaults("gpt", "tutorial")
	if err != nil {
		t.Fatal(err)
	}
	const budget = 1 << 30
	ask := func(opts plan.StateOptions) plan.Largest {
		row, err := plan.LargestThatFits(backend, base, budget, opts, false, nil)
		if err != nil {
			t.Fatal(err)
		}
		if !row.Fits || row.Memory > budget {
			t.Fatalf("%s: %+v does not fit %d bytes", opts.Name, row, budget)
		}
		return row
	}
	tutorial, state := ask(plan.TutorialTechniques), ask(plan.StateTechniques)
	next := plan.ScaledGPT(tutorial.Hidden/128 + 1)
	for _, v := range []plan.Variant{{Compute: "bfloat16", Remat: "block", MicroBatches: 4}, {Compute: "bfloat16", Remat: "block", MicroBatches: 1}} {
		c := base
		c.GPT, c.Batch = next, next.Batch
		config, err := v.Apply(c)
		if err != nil {
			t.Fatal(err)
		}
		config.Optimizer, config.Offload = train.OptimizerAdam, train.OffloadNone
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
	t.Logf("%d layers × %d (%d params) vs %d layers × %d (%d params)", tutorial.Layers, tutorial.Hidden, tutorial.Params,
		state.Layers, state.Hidden, state.Params)
}

// TestSearchStateClimbsTheLadder: on a budget just under what Adam on the device needs at the
// least, the search answers with 8-bit Adam; just under that rung's least, with the optimizer
// offloaded; and each answer fits.
func TestSearchStateClimbsTheLadder(t *testing.T) {
	backend := testkit.Embedded()
	base, err := plan.Defaults("gpt", "tiny")
	if err != nil {
		t.Fatal(err)
	}
	base.Batch, base.MicroBatches, base.GPT.MicroBatch = 2, 1, 1 // a grid of 20 variants
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
		c := base
		c.Optimizer, c.Offload = below.Optimizer, below.Offload
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
