package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/onegpu/onegpu/platform"
)

// TestBenchChunkingGrid: bench --grid chunking estimates the four choices of plain or chunked
// attention and loss at the run's settings, plain first; chunked attention and loss need less
// memory than plain at sequence 1024; the table names each row.
func TestBenchChunkingGrid(t *testing.T) {
	t.Setenv(platform.EnvBackend, "")
	t.Setenv(platform.EnvPlugin, "")
	args := []string{"--grid", "chunking", "--preset", "tiny", "--seq", "1024", "--batch", "2", "--microbatches", "1", "--remat", "block", "--estimate-only"}
	var out bytes.Buffer
	if err := runBench(append(args, "--json"), &out); err != nil {
		t.Fatal(err)
	}
	var r struct{ Rows []benchRow }
	if err := json.Unmarshal(out.Bytes(), &r); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, row := range r.Rows {
		if row.Error != "" {
			t.Fatalf("%s/%s: %s", row.Attention, row.CrossEntropy, row.Error)
		}
		names = append(names, row.Attention+"/"+row.CrossEntropy)
	}
	if got := strings.Join(names, " "); got != "plain/plain plain/chunked=512 chunked/plain chunked/chunked=512" {
		t.Fatalf("rows %s", got)
	}
	if last := r.Rows[3]; !(last.PeakRatio < 1) || r.Rows[0].PeakRatio != 1 || last.Remat != "block" {
		t.Errorf("chunked attention and loss: %.2fx plain's memory (remat %s), want less than 1x", last.PeakRatio, last.Remat)
	}
	out.Reset()
	if err := runBench(args, &out); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"attention  cross-entropy", "chunked    chunked=512", "ratios are to the first row (plain attention and loss)"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("the table does not say %q:\n%s", want, out.String())
		}
	}
}
