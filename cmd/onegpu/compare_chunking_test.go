package main

import (
	"bytes"
	"encoding/json"
	"os"
	"strings"
	"testing"

	"github.com/onegpu/onegpu/platform"
)

// TestCompareChunkedAgainstPlainJAX: compare with chunked attention and cross-entropy on the
// onegpu side (blocks of 16 and chunks of 20 over a sequence of 45, a multiple of neither) and the
// JAX reference's plain attention and loss, as a JAX user writes them: the tiny GPT in float32
// trains to the same losses within compare's float32 tolerance (1e-5), and the configuration's
// name says which side chunked.
func TestCompareChunkedAgainstPlainJAX(t *testing.T) {
	python := referencePython()
	plugin := os.Getenv(platform.EnvPlugin)
	if python == "" || plugin == "" {
		t.Skipf("needs ../../.venv/bin/python with JAX and $%s (both set up by .ci/run): the side-by-side with JAX is not run", platform.EnvPlugin)
	}
	if testing.Short() {
		t.Skip("compiles a train step on each side (about 40 s)")
	}
	t.Parallel() // a JAX process and an XLA compile: beside the other comparisons
	var out, progress bytes.Buffer
	err := runCompare([]string{"--json", "--steps", "3", "--backend", "xla:" + plugin, "--python", python, "--config",
		"--model gpt --preset tiny --seq 45 --batch 2 --microbatches 1 --policy float32 --attention chunked=16 --cross-entropy chunked=20",
	}, &out, &progress)
	var report compareReport
	if jerr := json.Unmarshal(out.Bytes(), &report); jerr != nil || len(report.Configs) != 1 {
		t.Fatalf("compare printed no JSON (%v; err %v):\n%s\n%s", jerr, err, out.String(), progress.String())
	}
	c := report.Configs[0]
	t.Logf("%s: largest relative loss difference %.2g (tolerance %.0e)", c.Name, c.MaxRelDiff, c.Tolerance)
	if err != nil || c.Error != "" || !c.Agree || len(c.LossRelDiff) != 3 {
		t.Errorf("chunked onegpu vs plain JAX: %v, error %q, relative differences %v\n%s", err, c.Error, c.LossRelDiff, progress.String())
	}
	if !strings.Contains(c.Name, "attention chunked=16, cross-entropy chunked=20") {
		t.Errorf("the configuration's name %q does not say onegpu chunked", c.Name)
	}
}
