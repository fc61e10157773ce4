package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

// TestBenchHost: --grid host measures the bandwidth and each optimizer's host update (figures
// positive and consistent: the bound is the bandwidth over the bytes moved), and refuses the flags
// of a model it does not build.
func TestBenchHost(t *testing.T) {
	var out bytes.Buffer
	if err := runBench([]string{"--grid", "host", "--host-params", "65536", "--steps", "1", "--host-backend", "go", "--jax=false", "--json"}, &out); err != nil {
		t.Fatal(err)
	}
	var r hostBench
	if err := json.Unmarshal(out.Bytes(), &r); err != nil {
		t.Fatalf("%v in %s", err, out.String())
	}
	if !(r.CopyGBs > 0 && r.TriadGBs > 0) || r.BoundGBs != max(r.CopyGBs, r.TriadGBs) {
		t.Errorf("bandwidth %+v", r)
	}
	// The flat loops of Adam, AdamW and 8-bit Adam, and every optimizer's graph update.
	if len(r.Rows) != 7 {
		t.Fatalf("%d rows, want adam, adamw, adam8bit (flat loop and graph), adafactor (graph): %s", len(r.Rows), out.String())
	}
	// Adam moves the gradient (4), the master and both moments read and written (24) and the bf16
	// parameter out (2).
	wantBytes := map[string]float64{"adam": 30}
	for _, row := range r.Rows {
		if row.Error != "" || row.Params != 65536 || !(row.ParamsPerSecond > 0) {
			t.Errorf("row %+v", row)
		}
		name := strings.SplitN(row.Optimizer, "(", 2)[0]
		if w, ok := wantBytes[name]; ok && row.BytesPerParam != w {
			t.Errorf("%s: %g bytes per parameter, want %g", name, row.BytesPerParam, w)
		}
		if bound := r.BoundGBs * 1e9 / row.BytesPerParam; abs(row.BoundParamsPerSecond-bound) > 1e-6*bound {
			t.Errorf("%s: bound %g, want %g", name, row.BoundParamsPerSecond, bound)
		}
	}
	err := runBench([]string{"--grid", "host", "--preset", "small"}, &out)
	if err == nil || !strings.Contains(err.Error(), "--preset does not apply") {
		t.Errorf("--preset with --grid host: %v", err)
	}
	err = runBench([]string{"--grid", "host", "--host-params", "100"}, &out)
	if err == nil || !strings.Contains(err.Error(), "--host-params 100") {
		t.Errorf("--host-params 100: %v", err)
	}
}

func abs(x float64) float64 { return max(x, -x) }
