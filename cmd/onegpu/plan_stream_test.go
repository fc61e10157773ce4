package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/onegpu/onegpu/plan"
	"github.com/onegpu/onegpu/platform"
)

// TestPlanStreamed: plan and memory with --offload params report the streamed step's device and
// host bytes against the budgets, with the step's time and bound.
func TestPlanStreamed(t *testing.T) {
	t.Setenv(platform.EnvBackend, "") // the embedded backend: XLA would compile every size
	t.Setenv(platform.EnvPlugin, "")
	var out bytes.Buffer
	if err := runPlan([]string{"--preset", "tiny", "--offload", "params", "--budget", "1GiB", "--host", "1GiB", "--backend", "go", "--json"}, &out); err != nil {
		t.Fatal(err)
	}
	var p struct {
		Fits            bool          `json:"fits"`
		HostBudgetBytes int64         `json:"host_budget_bytes"`
		Streamed        plan.Streamed `json:"streamed"`
	}
	if err := json.Unmarshal(out.Bytes(), &p); err != nil {
		t.Fatalf("%v in %s", err, out.String())
	}
	if !p.Fits || p.HostBudgetBytes != 1<<30 || p.Streamed.Params != 137_216 || p.Streamed.Bound == "" {
		t.Errorf("plan --offload params: %s", out.String())
	}
	out.Reset()
	if err := runMemory([]string{"--model", "gpt", "--preset", "tiny", "--offload", "params", "--budget", "2MiB", "--host", "1GiB", "--backend", "go"}, &out); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"137,216 parameters in 4 stages", "device: 2.4 MiB does NOT fit 2.0 MiB", "host: 2.1 MiB fits 1.0 GiB", "bound by"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("memory --offload params: no %q in\n%s", want, out.String())
		}
	}
}

// TestPlanLargestStreamed: plan --largest lists the streamed rows after the tutorial's two, with
// "offload": "params" and their optimizer, each larger than every on-device answer.
func TestPlanLargestStreamed(t *testing.T) {
	t.Setenv(platform.EnvBackend, "") // the embedded backend: XLA would compile every size
	t.Setenv(platform.EnvPlugin, "")
	var out bytes.Buffer
	if err := runPlan([]string{"--largest", "--budget", "24GiB", "--host", "128GiB", "--backend", "go", "--json"}, &out); err != nil {
		t.Fatal(err)
	}
	var r struct {
		HostBudgetBytes int64          `json:"host_budget_bytes"`
		Largest         []plan.Largest `json:"largest"`
	}
	if err := json.Unmarshal(out.Bytes(), &r); err != nil {
		t.Fatalf("%v in %s", err, out.String())
	}
	if len(r.Largest) != 4 || r.HostBudgetBytes != 128<<30 {
		t.Fatalf("%d rows: %s", len(r.Largest), out.String())
	}
	for i, want := range []string{"adam", "adam8bit"} {
		row := r.Largest[2+i]
		if row.Options.Offload != "params" || row.Options.Optimizer != want || !row.Fits || row.HostMemory > 128<<30 || row.Memory > 24<<30 {
			t.Errorf("streamed row %d: %+v", i, row)
		}
		if row.Params <= r.Largest[1].Params {
			t.Errorf("streamed %s: %d parameters, no more than the optimizer offload's %d", want, row.Params, r.Largest[1].Params)
		}
	}
}

// TestStreamFlagsRefused: the streamed flags where nothing streams, and values that cannot be.
func TestStreamFlagsRefused(t *testing.T) {
	t.Setenv(platform.EnvBackend, "") // the embedded backend: XLA would compile every size
	t.Setenv(platform.EnvPlugin, "")
	for _, c := range []struct {
		run  func([]string, *bytes.Buffer) error
		args []string
		want string
	}{
		{planRun, []string{"--preset", "tiny", "--host", "128GiB"}, "--host does not apply: nothing streams"},
		{planRun, []string{"--preset", "tiny", "--offload", "params", "--host", "lots"}, `--host: "lots" is not a size`},
		{planRun, []string{"--preset", "tiny", "--offload", "params", "--host", "1GiB", "--bus-bandwidth", "0"}, "--bus-bandwidth 0"},
		{planRun, []string{"--preset", "tiny", "--offload", "params", "--host", "1GiB", "--host-rate", "-1"}, "--host-rate -1"},
		{planRun, []string{"--preset", "tiny", "--offload", "params", "--devices", "2"}, "the streamed step feeds one device"},
		{planRun, []string{"--model", "mlp", "--offload", "params", "--host", "1GiB"}, "does not run as stages"},
		{memoryRun, []string{"--model", "gpt", "--preset", "tiny", "--budget", "1GiB"}, "--budget does not apply"},
		{memoryRun, []string{"--model", "gpt", "--preset", "tiny", "--host-rate", "1e9"}, "--host-rate does not apply"},
		{memoryRun, []string{"--model", "gpt", "--preset", "tiny", "--offload", "params", "--timeline", "t.png"}, "--timeline does not apply"},
	} {
		var out bytes.Buffer
		if err := c.run(c.args, &out); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: %v, want %q", c.args, err, c.want)
		}
	}
}

func planRun(args []string, out *bytes.Buffer) error   { return runPlan(args, out) }
func memoryRun(args []string, out *bytes.Buffer) error { return runMemory(args, out) }

// TestPlanLargestLlamaStreamed: plan --largest --model llama --budget 24GiB --host 128GiB (the
// base run Llama-3.1-8B's without --preset) answers at least 8B parameters with Adam and 12B with
// 8-bit Adam, as streamed rows of its largest list;
// memory --offload params shows how Llama-3.1-8B fits.
func TestPlanLargestLlamaStreamed(t *testing.T) {
	t.Setenv(platform.EnvBackend, "")
	t.Setenv(platform.EnvPlugin, "")
	var out bytes.Buffer
	if err := runPlan([]string{"--largest", "--model", "llama", "--budget", "24GiB", "--host", "128GiB", "--json"}, &out); err != nil {
		t.Fatal(err)
	}
	var r struct{ Largest []plan.Largest }
	if err := json.Unmarshal(out.Bytes(), &r); err != nil || len(r.Largest) != 4 { // on the device, then streamed
		t.Fatalf("%v: %s", err, out.String())
	}
	for i, c := range []struct {
		optimizer string
		least     int64
	}{{"adam", 8_000_000_000}, {"adam8bit", 12_000_000_000}} {
		row := r.Largest[2+i]
		if row.Options.Offload != "params" || row.Options.Optimizer != c.optimizer || !row.Fits || row.Params < c.least {
			t.Errorf("row %d: %+v, want %s streamed with at least %d parameters", i, row, c.optimizer, c.least)
		}
	}
	out.Reset()
	if err := runMemory([]string{"--model", "llama", "--preset", "llama-3.1-8b", "--offload", "params", "--budget", "24GiB", "--host", "128GiB"}, &out); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"8,030,261,248 parameters in 34 stages", "device: ", "fits 24.0 GiB", "fits 128.0 GiB", "float32 master weights"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("memory --model llama --offload params: no %q in\n%s", want, out.String())
		}
	}
}

// TestPlanStreamedMeasuresHostRate: --host-rate measure times the host engine's update of the
// run's optimizer on this machine (the embedded backend here) instead of taking the default, and
// a number is taken as given.
func TestPlanStreamedMeasuresHostRate(t *testing.T) {
	t.Setenv(platform.EnvBackend, "")
	t.Setenv(platform.EnvPlugin, "")
	t.Setenv("ONEGPU_HOST_PJRT_PLUGIN", "")
	for _, c := range []struct {
		rate string
		want func(float64) bool
	}{
		{"measure", func(r float64) bool { return r > 0 && r != plan.DefaultHostRates["adam"] }},
		{"1234", func(r float64) bool { return r == 1234 }},
	} {
		var out bytes.Buffer
		if err := runPlan([]string{"--preset", "tiny", "--offload", "params", "--host", "1GiB", "--host-rate", c.rate, "--json"}, &out); err != nil {
			t.Fatal(err)
		}
		var p struct{ Streamed plan.Streamed }
		if err := json.Unmarshal(out.Bytes(), &p); err != nil {
			t.Fatalf("%v in %s", err, out.String())
		}
		if !c.want(p.Streamed.HostParamsPerSec) || p.Streamed.HostSeconds != float64(p.Streamed.Params)/p.Streamed.HostParamsPerSec {
			t.Errorf("--host-rate %s: %+v", c.rate, p.Streamed.StepTime)
		}
	}
}
