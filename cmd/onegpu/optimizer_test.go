package main

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/onegpu/onegpu/platform"
)

// smallMemoryReport returns a function that runs `onegpu memory --json` on the small GPT on the
// embedded backend with more flags.
func smallMemoryReport(t *testing.T) func(args ...string) memoryReport {
	t.Setenv(platform.EnvBackend, "")
	t.Setenv(platform.EnvPlugin, "")
	return func(args ...string) memoryReport {
		var out bytes.Buffer
		if err := runMemory(append([]string{"--model", "gpt", "--preset", "small", "--json"}, args...), &out); err != nil {
			t.Fatal(err)
		}
		var r memoryReport
		if err := json.Unmarshal(out.Bytes(), &r); err != nil {
			t.Fatal(err)
		}
		return r
	}
}

// TestMemoryAdam8bit: on the small GPT, 8-bit Adam's state at the peak is about a quarter of
// Adam's (2 bytes per element of the quantized tensors plus float32 scales and small tensors,
// against two float32 moments).
func TestMemoryAdam8bit(t *testing.T) {
	report := smallMemoryReport(t)
	adam, eight := report(), report("--optimizer", "adam8bit")
	state := func(r memoryReport) int64 { return r.Breakdown["optimizer_state"] }
	if want := 2 * 4 * adam.Params; state(adam) < want || state(adam) > want+1024 {
		t.Fatalf("Adam's optimizer state at the peak is %d bytes, want two float32 moments: %d", state(adam), want)
	}
	if ratio := float64(state(eight)) / float64(state(adam)); ratio < 0.25 || ratio > 0.27 {
		t.Errorf("8-bit Adam's state is %.3fx Adam's (%d vs %d bytes), want 0.25-0.27x", ratio, state(eight), state(adam))
	}
	if eight.Optimizer != "adam8bit" || eight.PeakBytes >= adam.PeakBytes {
		t.Errorf("8-bit Adam: optimizer %q, peak %d bytes vs Adam's %d", eight.Optimizer, eight.PeakBytes, adam.PeakBytes)
	}
}

// TestMemoryOffloadOptimizer: with the optimizer offloaded, the device's step holds no optimizer
// state and its peak drops by Adam's moments; the host section holds them, the parameters and the
// gradients (float32, as many bytes as the parameters).
func TestMemoryOffloadOptimizer(t *testing.T) {
	report := smallMemoryReport(t)
	whole, device := report(), report("--offload", "optimizer")
	moments := 2 * 4 * whole.Params
	if device.Offload != "optimizer" || device.Breakdown["optimizer_state"] != 0 || device.Host == nil {
		t.Fatalf("offloaded: offload %q, device optimizer state %d bytes, host %+v: want optimizer, 0 and a host section",
			device.Offload, device.Breakdown["optimizer_state"], device.Host)
	}
	h := device.Host
	if h.OptimizerState != moments || h.Parameters != 4*whole.Params || h.Gradients != 4*whole.Params {
		t.Errorf("host holds %+v, want optimizer state %d and parameters and gradients %d bytes each", *h, moments, 4*whole.Params)
	}
	if h.PeakBytes < h.Parameters+h.Gradients+h.OptimizerState {
		t.Errorf("host update's peak %d is less than what it holds", h.PeakBytes)
	}
	if saved := whole.PeakBytes - device.PeakBytes; saved < moments {
		t.Errorf("the device's peak drops by %d bytes, want at least the moments' %d", saved, moments)
	}
}
