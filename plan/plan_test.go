package plan_test

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/onegpu/onegpu/internal/testkit"
	"github.com/onegpu/onegpu/plan"
	"github.com/onegpu/onegpu/recipes"
	"github.com/onegpu/onegpu/train"
)

// TestGrid: the tutorial's 12 variants apply to the GPT; a micro-batch count that does not divide
// the batch is an error, and SearchGrid leaves such counts out.
func TestGrid(t *testing.T) {
	base, err := recipes.Defaults("gpt", "tiny")
	if err != nil {
		t.Fatal(err)
	}
	grid := plan.TutorialGrid()
	if len(grid) != 12 || grid[0] != (plan.Variant{Compute: "float32", Remat: "none", MicroBatches: 1}) {
		t.Fatalf("grid %v", grid)
	}
	for _, v := range grid {
		c, err := v.Apply(base)
		if err != nil || c.MicroBatches != v.MicroBatches || c.Remat.String() != v.Remat || c.Policy.Compute.String() == "" {
			t.Errorf("%s: %+v, %v", v, c, err)
		}
	}
	if _, err := (plan.Variant{Compute: "bfloat16", Remat: "none", MicroBatches: 3}).Apply(base); err == nil {
		t.Error("3 micro-batches of a batch of 16 applied without an error")
	}
	for _, v := range plan.SearchGrid(12) {
		if 12%v.MicroBatches != 0 {
			t.Errorf("SearchGrid(12) has %s", v)
		}
	}
	// Every variant Search tries on the tutorial GPT passes Validate, its unrolled-blocks bound
	// (train.MaxUnrolledBlocks) included: none is skipped as an error.
	tutorial, err := recipes.Defaults("gpt", "tutorial")
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range plan.SearchGrid(tutorial.Batch) {
		if _, err := v.Apply(tutorial); err != nil {
			t.Errorf("plan's grid on the tutorial GPT: %s: %v", v, err)
		}
	}
}

// TestSearchRefuses: Search plans the GPT only, at throughputs from MinTFLOPs to MaxTFLOPs.
func TestSearchRefuses(t *testing.T) {
	mlp, _ := recipes.Defaults("mlp", "")
	gpt, _ := recipes.Defaults("gpt", "tiny")
	for _, tc := range []struct {
		base train.Config
		rate plan.Throughput
		want string
	}{
		{mlp, plan.A5000, "plan the gpt"},
		{gpt, plan.Throughput{Float32: 0, BFloat16: 1}, "a float32 throughput of 0 TFLOP/s: give one from 1e-06 to 1e+06"},
	} {
		if _, err := plan.Search(testkit.Embedded(), tc.base, 1<<30, tc.rate, false); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Search: %v, want %q", err, tc.want)
		}
	}
}

// TestSearchDevices: one device's share of the step shrinks with the devices and with what is
// sharded; on one device the candidates are Search's; a device's share of the activations is what
// one device needs for its share of the batch (the step built with batch/n, an independent
// estimate); and a budget nothing meets on one device is answered with the fewest devices that
// meet it.
func TestSearchDevices(t *testing.T) {
	backend := testkit.Embedded()
	base, err := recipes.Defaults("gpt", "tiny")
	if err != nil {
		t.Fatal(err)
	}
	base.Batch, base.MicroBatches = 8, 1
	single, err := plan.Search(backend, base, 1<<40, plan.A5000, false)
	if err != nil {
		t.Fatal(err)
	}
	budget := single[0].PeakBytes
	for _, one := range single {
		budget = min(budget, one.PeakBytes-1) // nothing fits on one device
	}
	rows, err := plan.SearchDevices(backend, base, budget, plan.A5000, 4)
	if err != nil {
		t.Fatal(err)
	}
	byKey := map[string]plan.DeviceCandidate{}
	for _, r := range rows {
		byKey[fmt.Sprintf("%s/%d/%s", r.Variant, r.Devices, r.Shard)] = r
		if r.Fits != (r.PerDeviceBytes <= budget) {
			t.Errorf("%+v: fits %v with a budget of %d", r, r.Fits, budget)
		}
	}
	if got := len(rows); got > len(single)*(1+3+3) || got < len(single)*4 {
		t.Errorf("%d candidates for %d variants on 1, 2 and 4 devices", got, len(single))
	}
	for _, one := range single {
		on1 := byKey[fmt.Sprintf("%s/1/none", one.Variant)]
		if on1.PerDeviceBytes != one.PeakBytes || on1.Seconds != one.Seconds {
			t.Errorf("%s on 1 device: %d bytes, %gs; Search: %d bytes, %gs", one.Variant, on1.PerDeviceBytes, on1.Seconds, one.PeakBytes, one.Seconds)
		}
		for _, n := range []int{2, 4} {
			none, ok := byKey[fmt.Sprintf("%s/%d/none", one.Variant, n)]
			if !ok {
				continue // its micro-batches do not split a device's share
			}
			opt, params := byKey[fmt.Sprintf("%s/%d/optimizer", one.Variant, n)], byKey[fmt.Sprintf("%s/%d/params", one.Variant, n)]
			if !(params.PerDeviceBytes < opt.PerDeviceBytes && opt.PerDeviceBytes < none.PerDeviceBytes && none.PerDeviceBytes < one.PeakBytes) {
				t.Errorf("%s on %d devices: params %d, optimizer %d, none %d, one device %d: want each smaller than the next",
					one.Variant, n, params.PerDeviceBytes, opt.PerDeviceBytes, none.PerDeviceBytes, one.PeakBytes)
			}
			if none.Seconds*float64(n) != one.Seconds {
				t.Errorf("%s on %d devices: %gs, one device %gs", one.Variant, n, none.Seconds, one.Seconds)
			}
		}
	}
	order := plan.ByFewestDevices(rows)
	if len(order) == 0 || rows[order[0]].Devices == 1 {
		t.Fatalf("budget %d: fewest devices %v", budget, order)
	}
	for k := 1; k < len(order); k++ {
		if a, b := rows[order[k-1]], rows[order[k]]; a.Devices > b.Devices || a.Devices == b.Devices && a.Seconds > b.Seconds {
			t.Errorf("%+v before %+v", a, b)
		}
	}
	i := order[0]
	for _, r := range rows {
		if r.Fits && (r.Devices < rows[i].Devices || r.Devices == rows[i].Devices && r.Seconds < rows[i].Seconds) {
			t.Errorf("%+v fits on fewer devices, or faster on as many, than the answer %+v", r, rows[i])
		}
	}

	// Activations of one of 4 devices: the same variant built for a quarter of the batch.
	v := plan.Variant{Compute: "bfloat16", Remat: "none", MicroBatches: 1}
	quarter := base
	quarter.Batch = base.Batch / 4
	small, err := plan.EstimateStep(backend, mustApply(t, v, quarter), false)
	if err != nil {
		t.Fatal(err)
	}
	full, err := plan.EstimateStep(backend, mustApply(t, v, base), false)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := float64(full.ActivationBytes)/4, float64(small.ActivationBytes); got < 0.85*want || got > 1.15*want {
		t.Errorf("a quarter of the batch's activations: %.0f bytes from the share, %.0f from the step built for it", got, want)
	}
	if _, err := plan.SearchDevices(backend, base, budget, plan.A5000, 0); err == nil {
		t.Error("0 devices planned without an error")
	}
}

func mustApply(t *testing.T, v plan.Variant, base train.Config) train.Config {
	t.Helper()
	c, err := v.Apply(base)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestSearchOver: a search over chosen variants estimates those and no others, fastest first,
// with the smallest of the fastest on the Pareto front and Fits against the budget.
func TestSearchOver(t *testing.T) {
	gpt, _ := recipes.Defaults("gpt", "tiny")
	variants := []plan.Variant{{Compute: "float32", Remat: "mlp,attn", MicroBatches: 1}, {Compute: "float32", Remat: "none", MicroBatches: 4}}
	rows, err := plan.SearchOver(variants, testkit.Embedded(), gpt, 1<<40, plan.A5000, false)
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 2 || rows[0].Variant != variants[1] || rows[1].Variant != variants[0] {
		t.Fatalf("rows %+v, want the two variants, the one without remat (fewer FLOPs) first", rows)
	}
	if !rows[0].Pareto || !rows[0].Fits || !(rows[0].Seconds < rows[1].Seconds) {
		t.Errorf("first row %+v: want it on the front, fitting 1 TiB, faster than the second", rows[0])
	}
}

// TestDeviceCounts: the counts are the divisors of the batch up to the devices available, in
// order; a device count far past the batch (10^12) costs no more than the batch's divisors (the
// call returns at once: it used to try every count up to it).
func TestDeviceCounts(t *testing.T) {
	for _, c := range []struct {
		devices, batch int
		want           []int
	}{
		{1, 64, []int{1}},
		{4, 8, []int{1, 2, 4}},
		{6, 12, []int{1, 2, 3, 4, 6}},
		{100, 36, []int{1, 2, 3, 4, 6, 9, 12, 18, 36}},
		{1_000_000_000_000, 16, []int{1, 2, 4, 8, 16}},
		{1 << 62, 1 << 40, nil}, // 41 powers of two, checked below
		{5, 7, []int{1}},
	} {
		done := make(chan []int, 1)
		go func() { done <- plan.DeviceCounts(c.devices, c.batch) }()
		var got []int
		select {
		case got = <-done:
		case <-time.After(time.Minute): // a hang detector, not a speed claim: the answer takes microseconds
			t.Fatalf("DeviceCounts(%d, %d) did not return: it must not try every count up to the devices", c.devices, c.batch)
		}
		if c.want == nil {
			for i := range 41 {
				c.want = append(c.want, 1<<i)
			}
		}
		if !slices.Equal(got, c.want) {
			t.Errorf("DeviceCounts(%d, %d) = %v, want %v", c.devices, c.batch, got, c.want)
		}
	}
}

// TestThroughputRange: a throughput outside [MinTFLOPs, MaxTFLOPs] is refused by name, so that no
// step time is infinite (a 1e-320 TFLOP/s device made plan's JSON fail on +Inf).
func TestThroughputRange(t *testing.T) {
	backend := testkit.Embedded()
	base, err := recipes.Defaults("gpt", "tiny")
	if err != nil {
		t.Fatal(err)
	}
	for _, rate := range []plan.Throughput{{Float32: 1e-320, BFloat16: 1}, {Float32: 1, BFloat16: 0}, {Float32: 1, BFloat16: 1e7}, {Float32: math.NaN(), BFloat16: 1}} {
		if _, err := plan.SearchOver(plan.SearchGrid(1)[:1], backend, base, 1<<30, rate, false); err == nil || !strings.Contains(err.Error(), "TFLOP/s") {
			t.Errorf("throughput %+v: %v, want an error naming it", rate, err)
		}
	}
	rows, err := plan.SearchOver(plan.SearchGrid(1)[:1], backend, base, 1<<30, plan.Throughput{Float32: plan.MinTFLOPs, BFloat16: plan.MinTFLOPs}, false)
	if err != nil || len(rows) != 1 || math.IsInf(rows[0].Seconds, 0) || !(rows[0].Seconds > 0) {
		t.Errorf("the slowest throughput: %+v, %v; want a finite step time", rows, err)
	}
}
