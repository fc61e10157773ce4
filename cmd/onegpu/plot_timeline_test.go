package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/onegpu/onegpu/platform"
)

// TestMemoryTimeline: memory --timeline writes a PNG of the step's live bytes whose largest value
// is the reported peak; the timeline's blocks are the GPT's blocks forward, the loss, the
// blocks' recomputations in reverse and the optimizer's update; with chunked attention and loss
// at sequence 1024 the peak is lower.
func TestMemoryTimeline(t *testing.T) {
	t.Setenv(platform.EnvBackend, "")
	t.Setenv(platform.EnvPlugin, "")
	dir := t.TempDir()
	report := func(file string, extra ...string) *memoryReport {
		o := memoryOptions{timeline: file}
		fs := newFlagSet("memory", "")
		o.setup.register(fs, "gpt", "tiny")
		if err := parseArgs(fs, append([]string{"--remat", "block", "--batch", "2", "--microbatches", "1", "--seq", "1024"}, extra...)); err != nil {
			t.Fatal(err)
		}
		r, err := analyzeMemory(o)
		if err != nil {
			t.Fatal(err)
		}
		peak, err := plotTimeline(file, r.title, r.Timeline, r.steps)
		if err != nil {
			t.Fatal(err)
		}
		if peak != r.PeakBytes || slices.Max(r.Timeline) != r.PeakBytes {
			t.Errorf("the plot's largest value %d, the timeline's %d, the reported peak %d", peak, slices.Max(r.Timeline), r.PeakBytes)
		}
		png, err := os.ReadFile(file)
		if err != nil || !bytes.HasPrefix(png, []byte("\x89PNG")) {
			t.Errorf("%s is not a PNG file (%v)", file, err)
		}
		return r
	}
	plain := report(filepath.Join(dir, "plain.png"))
	var blocks []string
	for _, b := range plain.TimelineBlocks {
		if b.Block != "forward" && b.Block != "backward" { // ops in no section: embeddings, residuals, ...
			blocks = append(blocks, b.Block)
		}
	}
	if got, want := strings.Join(blocks, ", "), "block_0, block_1, loss, block_1 backward, block_0 backward, optimizer"; got != want {
		t.Errorf("the timeline's blocks are %q, want %q", got, want)
	}
	chunked := report(filepath.Join(dir, "chunked.png"), "--attention", "chunked=256", "--cross-entropy", "chunked=256")
	if chunked.PeakBytes >= plain.PeakBytes {
		t.Errorf("chunked attention and loss peak at %d bytes, plain at %d: want less", chunked.PeakBytes, plain.PeakBytes)
	}
	// As a user runs it: the file is written and named.
	var out bytes.Buffer
	file := filepath.Join(dir, "cli.png")
	if err := runMemory([]string{"--model", "gpt", "--preset", "tiny", "--timeline", file, "--json"}, &out); err != nil {
		t.Fatal(err)
	}
	var r struct {
		PeakBytes      int64           `json:"peak_bytes"`
		TimelineFile   string          `json:"timeline_file"`
		TimelineBlocks []timelineBlock `json:"timeline_blocks"`
	}
	if err := json.Unmarshal(out.Bytes(), &r); err != nil || r.TimelineFile != file {
		t.Fatalf("%v: timeline_file %q, want %q", err, r.TimelineFile, file)
	}
	var most int64
	for _, b := range r.TimelineBlocks {
		most = max(most, b.PeakBytes)
	}
	if most != r.PeakBytes {
		t.Errorf("the blocks' largest peak %d, the step's %d", most, r.PeakBytes)
	}
	if _, err := os.Stat(file); err != nil {
		t.Error(err)
	}
}

// TestWrapTitle: a long title is cut at its ", " separators into lines of at most the width, and
// the lines joined again are the title; a part longer than the width keeps a line of its own.
func TestWrapTitle(t *testing.T) {
	title := "a train step's memory: Llama (16 layers × 2048, 32 heads of 64 with 8 key/value heads, MLP 8192, sequence 8192), " +
		"batch 1, compute BFloat16, remat block, 1 micro-batch, attention chunked (block 1024), cross-entropy chunked=512"
	got := wrapTitle(title, 60)
	lines := strings.Split(got, "\n")
	for _, l := range lines {
		if len([]rune(l)) > 60 {
			t.Errorf("line %q is longer than 60", l)
		}
	}
	if len(lines) < 4 || strings.ReplaceAll(got, "\n", " ") != title {
		t.Errorf("wrapped into %d lines:\n%s", len(lines), got)
	}
	if got := wrapTitle("one part longer than ten, b", 10); got != "one part longer than ten,\nb" {
		t.Errorf("got %q", got)
	}
}
