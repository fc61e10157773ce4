package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/onegpu/onegpu/platform"
)

// TestPlanLongest: plan --longest on the tiny GPT answers in JSON the longest sequence and the
// options that fit it, at least 4 times what plain attention and loss allow, and the same length
// for those options fixed by the flags.
func TestPlanLongest(t *testing.T) {
	t.Setenv(platform.EnvBackend, "")
	t.Setenv(platform.EnvPlugin, "")
	type row struct {
		Seq          int    `json:"seq"`
		Attention    string `json:"attention"`
		CrossEntropy string `json:"cross_entropy"`
		Fits         bool   `json:"fits"`
	}
	ask := func(args ...string) (longest *row, rows []row) {
		var out bytes.Buffer
		if err := runPlan(append([]string{"--longest", "--preset", "tiny", "--budget", "96MiB", "--json"}, args...), &out); err != nil {
			t.Fatal(err)
		}
		var r struct {
			Longest   *row  `json:"longest"`
			ByOptions []row `json:"by_options"`
		}
		if err := json.Unmarshal(out.Bytes(), &r); err != nil {
			t.Fatalf("not JSON: %v\n%s", err, out.String())
		}
		return r.Longest, r.ByOptions
	}
	longest, rows := ask()
	if len(rows) != 4 || longest == nil || rows[0].Attention != "plain" || rows[0].CrossEntropy != "plain" {
		t.Fatalf("longest %+v of %+v: want 4 rows, plain first", longest, rows)
	}
	if longest.Seq < 4*rows[0].Seq || longest.Attention != "chunked" {
		t.Errorf("longest %+v, plain %+v: want chunked attention and at least 4x plain's", longest, rows[0])
	}
	fixed, rows := ask("--attention", "plain", "--cross-entropy", "plain")
	if len(rows) != 1 || fixed.Seq != rows[0].Seq || fixed.Attention != "plain" {
		t.Errorf("with plain fixed: %+v of %+v, want one row, plain's %d", fixed, rows, rows[0].Seq)
	}
	var text bytes.Buffer
	if err := runPlan([]string{"--longest", "--preset", "tiny", "--budget", "96MiB"}, &text); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(text.String(), "longest: ") || !strings.Contains(text.String(), "tokens of plain attention and loss") {
		t.Errorf("the text does not say the longest and its gain:\n%s", text.String())
	}
}
