package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"strings"
	"testing"

	"github.com/onegpu/onegpu/plan"
	"github.com/onegpu/onegpu/platform"
	"github.com/onegpu/onegpu/recipes"
)

func TestPlan(t *testing.T) {
	t.Setenv(platform.EnvBackend, "")
	t.Setenv(platform.EnvPlugin, "")
	var out bytes.Buffer
	if err := runPlan([]string{"--preset", "tiny", "--budget", "6MiB", "--json"}, &out); err != nil {
		t.Fatal(err)
	}
	var r struct {
		BudgetBytes int64 `json:"budget_bytes"`
		Best        *plan.Candidate
		Rows        []plan.Candidate
	}
	if err := json.Unmarshal(out.Bytes(), &r); err != nil {
		t.Fatal(err)
	}
	if r.BudgetBytes != 6<<20 || r.Best == nil || r.Best.PeakBytes > r.BudgetBytes {
		t.Fatalf("budget %d, best %+v: want a configuration within the budget", r.BudgetBytes, r.Best)
	}
	for _, row := range r.Rows {
		if row.Fits && row.Seconds < r.Best.Seconds {
			t.Errorf("%s fits and is faster (%.4fs) than the chosen %s (%.4fs)", row.Variant, row.Seconds, r.Best.Variant, r.Best.Seconds)
		}
	}

	// A budget below the parameters and optimizer state of the leanest rung is answered from one
	// estimate (before: every rung of states and chunkings was searched, 199 s for 1 byte).
	for _, budget := range []string{"1KiB", "1B"} {
		out.Reset()
		if err := runPlan([]string{"--preset", "tiny", "--budget", budget}, &out); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(out.String(), "nothing fits") || !strings.Contains(out.String(), "the parameters, the optimizer's state and one batch alone take") ||
			!strings.Contains(out.String(), "more than the budget") {
			t.Errorf("--budget %s: a budget nothing fits should say so and by how much:\n%s", budget, out.String())
		}
		out.Reset()
		if err := runPlan([]string{"--preset", "tiny", "--budget", budget, "--json"}, &out); err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(out.Bytes(), &r); err != nil || len(r.Rows) != 1 || r.Best != nil || r.Rows[0].Fits {
			t.Errorf("--budget %s --json: %v, %d rows, best %v; want the one estimate that answers", budget, err, len(r.Rows), r.Best)
		}
	}
}

func TestParseBytes(t *testing.T) {
	for text, want := range map[string]int64{"24GiB": 24 << 30, "80GB": 80e9, "512 MiB": 512 << 20, "1.5TiB": 3 << 39, "1000": 1000, "64kb": 64e3,
		"2PiB": 2 << 50, "3EB": 3e18, "7.5EiB": 15 << 59, "8EiB": math.MaxInt64, "9223372036854775807": math.MaxInt64} {
		if got, err := parseBytes(text); err != nil || got != want {
			t.Errorf("parseBytes(%q) = %d, %v; want %d", text, got, err, want)
		}
	}
	for _, bad := range []string{"", "lots", "-1GiB", "GiB", "0", "InfGiB", "NaNGiB", "-Inf", "nan"} {
		if _, err := parseBytes(bad); err == nil || !strings.Contains(err.Error(), "24GiB") {
			t.Errorf("parseBytes(%q): error %v, want one showing the accepted form", bad, err)
		}
	}
	// Past 8 EiB a size is too large for int64 bytes, and says so (it said "not a size").
	for _, huge := range []string{"8.5EiB", "9223372036854775809", "10EB", "9999999999TiB", "1e30", "1e400GiB"} {
		if _, err := parseBytes(huge); err == nil || !strings.Contains(err.Error(), fmt.Sprintf("%q is too large: sizes go up to 8EiB", huge)) {
			t.Errorf("parseBytes(%q): error %v, want one saying it is too large", huge, err)
		}
	}
}

// FuzzParseBytes: whatever the text, parseBytes returns a positive size or an error that quotes
// the text and says "not a size" or "too large", and never a size for text without digits.
func FuzzParseBytes(f *testing.F) {
	for _, seed := range []string{"24GiB", "8EiB", "9EiB", "1e30", "0", "-1", "NaN", "1.5 TiB", "", "kB", "0x10", "1e-400"} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, text string) {
		got, err := parseBytes(text)
		switch {
		case err != nil:
			if msg := err.Error(); !strings.Contains(msg, fmt.Sprintf("%q", text)) || !strings.Contains(msg, "not a size") && !strings.Contains(msg, "too large") {
				t.Errorf("parseBytes(%q): error %q names neither the text nor what is wrong", text, msg)
			}
		case got < 1:
			t.Errorf("parseBytes(%q) = %d: a size is at least one byte", text, got)
		case !strings.ContainsAny(text, "0123456789"):
			t.Errorf("parseBytes(%q) = %d without a digit", text, got)
		}
	})
}

// TestPlanHugeBudget: the largest budget, 8EiB, plans: every configuration fits.
func TestPlanHugeBudget(t *testing.T) {
	t.Setenv(platform.EnvBackend, "")
	t.Setenv(platform.EnvPlugin, "")
	var out bytes.Buffer // --batch 1: one micro-batch count, so 10 configurations to build
	if err := runPlan([]string{"--preset", "tiny", "--batch", "1", "--budget", "8EiB", "--json"}, &out); err != nil {
		t.Fatal(err)
	}
	var r struct {
		BudgetBytes int64 `json:"budget_bytes"`
		Rows        []plan.Candidate
	}
	if err := json.Unmarshal(out.Bytes(), &r); err != nil {
		t.Fatal(err)
	}
	if r.BudgetBytes != math.MaxInt64 || len(r.Rows) != 10 {
		t.Errorf("budget %d bytes, %d rows; want the largest int64 and 10 rows", r.BudgetBytes, len(r.Rows))
	}
	for _, row := range r.Rows {
		if !row.Fits {
			t.Errorf("%s does not fit a budget of 8EiB", row.Variant)
		}
	}
}

// TestPlanLargestBounded: plan --largest answers a terabyte in a logarithmic number of model
// sizes (it took 898 s building every size in full), and an 8EiB budget as unbounded.
func TestPlanLargestBounded(t *testing.T) {
	t.Setenv(platform.EnvBackend, "")
	t.Setenv(platform.EnvPlugin, "")
	var out bytes.Buffer
	if err := runPlan([]string{"--largest", "--budget", "1TiB", "--host", "1TiB", "--json"}, &out); err != nil {
		t.Fatal(err)
	}
	var r struct{ Largest []plan.Largest }
	if err := json.Unmarshal(out.Bytes(), &r); err != nil || len(r.Largest) != 4 { // and the two streamed rows
		t.Fatalf("%v: %s", err, out.String())
	}
	for _, row := range r.Largest {
		if !row.Fits || row.Memory > 1<<40 || row.Evaluations > 15 {
			t.Errorf("%s: %+v, want a model within 1 TiB after at most 15 sizes", row.Options.Name, row)
		}
	}
	err := runPlan([]string{"--largest", "--budget", "8EiB"}, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "unbounded") {
		t.Errorf("plan --largest --budget 8EiB = %v, want it answered as unbounded", err)
	}
}

// TestPlanManyDevices: --devices far past the batch plans over the batch's divisors only (it
// looped over every count up to 10^12).
func TestPlanManyDevices(t *testing.T) {
	t.Setenv(platform.EnvBackend, "")
	t.Setenv(platform.EnvPlugin, "")
	var out bytes.Buffer
	if err := runPlan([]string{"--preset", "tiny", "--batch", "4", "--devices", "1000000000000", "--json"}, &out); err != nil {
		t.Fatal(err)
	}
	var r devicePlan
	if err := json.Unmarshal(out.Bytes(), &r); err != nil {
		t.Fatal(err)
	}
	if len(r.FastestOn) != 3 || r.FastestOn[2].Devices != 4 || r.MaxDevices != 1000000000000 {
		t.Errorf("fastest on each count %+v for up to %d devices: want 1, 2 and 4 devices", r.FastestOn, r.MaxDevices)
	}
}

// TestPlanDevices: with --devices N the plan answers with a device count: a budget one device
// cannot meet is met on more, and each count shows its fastest configuration. On an XLA backend
// with the devices, the answer is compiled partitioned and XLA's figure for one device decides.
func TestPlanDevices(t *testing.T) {
	t.Setenv(platform.EnvBackend, "")
	plugin := os.Getenv(platform.EnvPlugin)
	t.Setenv(platform.EnvPlugin, "")
	const budget = 2500 << 10 // the smallest step on one device needs 2.8 MiB
	var out bytes.Buffer
	if err := runPlan([]string{"--preset", "tiny", "--batch", "8", "--devices", "4", "--budget", "2500KiB", "--json"}, &out); err != nil {
		t.Fatal(err)
	}
	var r devicePlan
	if err := json.Unmarshal(out.Bytes(), &r); err != nil {
		t.Fatal(err)
	}
	if r.Fewest == nil || r.Fewest.Devices < 2 || r.Fewest.PerDeviceBytes > budget {
		t.Fatalf("fewest devices %+v: want more than one device within the budget", r.Fewest)
	}
	if len(r.FastestOn) != 3 || r.FastestOn[0].Devices != 1 || r.FastestOn[0].Fits || !r.FastestOn[2].Fits {
		t.Errorf("fastest on each count: %+v: want 1 (not fitting), 2, 4 (fitting)", r.FastestOn)
	}
	if plugin != "" {
		checkPlanOnXLA(t, plugin)
	}

	for _, bad := range []struct{ args []string }{
		{[]string{"--devices", "4", "--shard", "params"}},
		{[]string{"--devices", "0"}},
	} {
		if err := runPlan(bad.args, io.Discard); err == nil || !strings.Contains(err.Error(), "--"+strings.TrimPrefix(bad.args[len(bad.args)-2], "--")) {
			t.Errorf("plan %v: %v, want an error naming the flag", bad.args, err)
		}
	}
}

// TestPlanDevicesAnswer: XLA's figure decides between the candidates the estimate lets fit:
// refused ones are listed and the next is tried, up to xlaChecks; a candidate the backend has too
// few devices for leaves the estimate's answer.
func TestPlanDevicesAnswer(t *testing.T) {
	var rows []plan.DeviceCandidate
	for _, n := range []int{4, 2, 2, 2, 2, 2, 1} {
		rows = append(rows, plan.DeviceCandidate{Devices: n, Shard: "params", Fits: n > 1, PerDeviceBytes: int64(100 * len(rows))})
	}
	xla := map[int64]int64{0: 900, 100: 700, 200: 500, 300: 90, 400: 80, 500: 70}
	var tried []int64
	compiled := func(c plan.DeviceCandidate) (int64, bool, error) {
		tried = append(tried, c.PerDeviceBytes)
		return xla[c.PerDeviceBytes], c.Devices <= 2, nil
	}
	for _, tc := range []struct {
		budget        int64
		want, wantXLA int64 // the answer's estimate and XLA's figure
		tried         []int64
	}{
		{1000, 100, 700, []int64{100}},            // the first on 2 devices fits
		{600, 200, 500, []int64{100, 200}},        // XLA refuses the first
		{60, 100, 0, []int64{100, 200, 300, 400}}, // XLA refuses xlaChecks: the estimate's answer
	} {
		tried = nil
		p := devicePlan{BudgetBytes: tc.budget}
		if err := p.answer(rows, compiled); err != nil {
			t.Fatal(err)
		}
		if p.Fewest == nil || p.Fewest.PerDeviceBytes != tc.want || p.XLAPerDeviceBytes != tc.wantXLA || fmt.Sprint(tried) != fmt.Sprint(tc.tried) ||
			len(p.XLARefused) != len(tc.tried)-btoi(tc.wantXLA > 0) {
			t.Errorf("budget %d: answer %+v, XLA %d, tried %v, refused %d; want %d, %d, %v",
				tc.budget, p.Fewest, p.XLAPerDeviceBytes, tried, len(p.XLARefused), tc.want, tc.wantXLA, tc.tried)
		}
	}
	tried = nil
	p := devicePlan{BudgetBytes: 1000}
	if err := p.answer(rows[:1], compiled); err != nil || p.Fewest == nil || p.Fewest.Devices != 4 || p.XLAPerDeviceBytes != 0 {
		t.Errorf("a candidate on more devices than the backend has: %+v, XLA %d, %v", p.Fewest, p.XLAPerDeviceBytes, err)
	}
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// checkPlanOnXLA: on the XLA plugin a candidate on 2 devices is compiled, partitioned, and XLA's
// figure for one device confirms it.
func checkPlanOnXLA(t *testing.T, plugin string) {
	spec, err := platform.ResolveBackend("xla:" + plugin)
	if err != nil {
		t.Fatal(err)
	}
	backend, err := platform.NewBackendFromSpec(spec)
	if err != nil {
		t.Fatal(err)
	}
	defer backend.Finalize()
	base, err := recipes.Defaults("gpt", "tiny")
	if err != nil {
		t.Fatal(err)
	}
	base.Batch = 8
	candidate := plan.DeviceCandidate{Variant: plan.Variant{Compute: "bfloat16", Remat: "none", MicroBatches: 1}, Devices: 2, Shard: "params", Fits: true}
	p := devicePlan{BudgetBytes: 1 << 40}
	if err := p.answer([]plan.DeviceCandidate{candidate}, compiledPerDevice(backend, spec, base)); err != nil {
		t.Fatal(err)
	}
	if p.XLAPerDeviceBytes <= 0 || len(p.XLARefused) != 0 {
		t.Fatalf("a budget of 1 TiB: XLA's figure %d, refused %+v", p.XLAPerDeviceBytes, p.XLARefused)
	}
}
