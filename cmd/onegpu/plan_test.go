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

	ograph "github.com/onegpu/onegpu/graph"

	"github.com/onegpu/onegpu/plan"
)

func TestPlan(t *testing.T) {
	t.Setenv(ograph.EnvBackend, "")
	t.Setenv(ograph.EnvPlugin, "")
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

	out.Reset()
	if err := runPlan([]string{"--preset", "tiny", "--budget", "1KiB"}, &out); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "nothing fits") || !strings.Contains(out.String(), "more than the budget") {
		t.Errorf("a budget nothing fits should say so and by how much:\n%s", out.String())
	}
}

func TestParseBytes(t *testing.T) {
	for text, want := range map[string]int64{"24GiB": 24 << 30, "80GB": 80e9, "512 MiB": 512 << 20, "1.5TiB": 3 << 39, "1000": 1000, "64kb": 64e3} {
		if got, err := parseBytes(text); err != nil || got != want {
			t.Errorf("parseBytes(%q) = %d, %v; want %d", text, got, err, want)
		}
	}
	for _, bad := range []string{"", "lots", "-1GiB", "GiB", "0", "InfGiB", "NaNGiB", "-Inf", "nan"} {
		if _, err := parseBytes(bad); err == nil || !strings.Contains(err.Error(), "24GiB") {
			t.Errorf("parseBytes(%q): error %v, want one showing the accepted form", bad, err)
		}
	}
}

// TestPlanHugeBudget: a budget past int64 (9999999999TiB is 1.1e25 bytes, 1e30 more) does not
// wrap to a negative number: it reads as the largest, and every configuration fits.
func TestPlanHugeBudget(t *testing.T) {
	t.Setenv(ograph.EnvBackend, "")
	t.Setenv(ograph.EnvPlugin, "")
	for _, budget := range []string{"9999999999TiB", "1e30", "1e400GiB"} {
		if got, err := parseBytes(budget); err != nil || got != math.MaxInt64 {
			t.Errorf("parseBytes(%q) = %d, %v; want the largest int64", budget, got, err)
		}
	}
	var out bytes.Buffer // --batch 1: one micro-batch count, so 10 configurations to build
	if err := runPlan([]string{"--preset", "tiny", "--batch", "1", "--budget", "1e30", "--json"}, &out); err != nil {
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
			t.Errorf("%s does not fit a budget of 1e30 bytes", row.Variant)
		}
	}
}

// TestPlanDevices: with --devices N the plan answers with a device count: a budget one device
// cannot meet is met on more, and each count shows its fastest configuration. On an XLA backend
// with the devices, the answer is compiled partitioned and XLA's figure for one device decides.
func TestPlanDevices(t *testing.T) {
	t.Setenv(ograph.EnvBackend, "")
	plugin := os.Getenv(ograph.EnvPlugin)
	t.Setenv(ograph.EnvPlugin, "")
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
	spec, err := ograph.ResolveBackend("xla:" + plugin)
	if err != nil {
		t.Fatal(err)
	}
	backend, err := ograph.NewBackendFromSpec(spec)
	if err != nil {
		t.Fatal(err)
	}
	defer backend.Finalize()
	base, err := plan.Defaults("gpt", "tiny")
	if err != nil {
		t.Fatal(err)
	}
	base.Batch, base.GPT.Batch = 8, 8
	candidate := plan.DeviceCandidate{Variant: plan.Variant{Compute: "bfloat16", Remat: "none", MicroBatches: 1}, Devices: 2, Shard: "params", Fits: true}
	p := devicePlan{BudgetBytes: 1 << 40}
	if err := p.answer([]plan.DeviceCandidate{candidate}, compiledPerDevice(backend, spec, base)); err != nil {
		t.Fatal(err)
	}
	if p.XLAPerDeviceBytes <= 0 || len(p.XLARefused) != 0 {
		t.Fatalf("a budget of 1 TiB: XLA's figure %d, refused %+v", p.XLAPerDeviceBytes, p.XLARefused)
	}
}
