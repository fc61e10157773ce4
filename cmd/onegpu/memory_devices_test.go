package main

import (
	"bytes"
	"encoding/json"
	"os"
	"strings"
	"testing"

	"github.com/onegpu/onegpu/platform"
)

// TestMemoryDevicesNeedXLA: the embedded backend has one device; asking for two says what to use.
func TestMemoryDevicesNeedXLA(t *testing.T) {
	t.Setenv(platform.EnvBackend, "")
	t.Setenv(platform.EnvPlugin, "")
	err := runMemory([]string{"--model", "gpt", "--preset", "tiny", "--devices", "2"}, &bytes.Buffer{})
	if err == nil || !strings.Contains(err.Error(), "--devices 2") || !strings.Contains(err.Error(), "XLA PJRT plugin") {
		t.Errorf("memory --devices 2 on the embedded backend: error %v, want one naming --devices 2 and the XLA plugin", err)
	}
}

// TestMemoryDevicesJSON: with the optimizer state sharded across the CPU plugin's 4 devices, one
// device holds a quarter of Adam's moments and all of the weights, by the shapes of the shards
// and by XLA's own account of the partitioned step's arguments.
func TestMemoryDevicesJSON(t *testing.T) {
	plugin := os.Getenv(platform.EnvPlugin)
	if plugin == "" {
		t.Skipf("needs an XLA PJRT plugin: set $%s", platform.EnvPlugin)
	}
	var out bytes.Buffer
	err := runMemory([]string{"--model", "gpt", "--preset", "tiny", "--microbatches", "1", "--policy", "float32",
		"--backend", "xla:" + plugin, "--devices", "4", "--shard", "optimizer", "--json"}, &out)
	if err != nil {
		t.Fatal(err)
	}
	var r memoryReport
	if err := json.Unmarshal(out.Bytes(), &r); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, out.String())
	}
	d := r.Devices
	if d == nil || d.Count != 4 || d.Shard != "optimizer" {
		t.Fatalf("devices %+v, want 4 devices sharding the optimizer", d)
	}
	if d.StatePerDevice.Params != d.StateTotal.Params {
		t.Errorf("one device holds %d bytes of weights, want all %d (replicated)", d.StatePerDevice.Params, d.StateTotal.Params)
	}
	if ratio := float64(d.StatePerDevice.OptimizerState) / float64(d.StateTotal.OptimizerState); ratio > 0.3 {
		t.Errorf("one device holds %.2fx the optimizer state, want <= 0.3x", ratio)
	}
	if got, single := r.Breakdown["optimizer_state"], d.SingleDeviceBreakdown["optimizer_state"]; got*3 > single {
		t.Errorf("breakdown_at_peak holds %d bytes of optimizer state, the single device %d: want one device's quarter", got, single)
	}
	// XLA's arguments per device: the weights, a quarter of the moments, a quarter of the batch.
	args, single := d.XLAPerDevice.ArgumentBytes, r.XLA.ArgumentBytes
	want := d.StatePerDevice.Params + d.StatePerDevice.OptimizerState
	if args < want || float64(args) > 0.6*float64(single) {
		t.Errorf("XLA's arguments per device %d bytes, want at least the state's %d and well under the single device's %d", args, want, single)
	}
}
