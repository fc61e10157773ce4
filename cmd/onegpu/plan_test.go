package main

import (
	"bytes"
	"encoding/json"
	"math"
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
