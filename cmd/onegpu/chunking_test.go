package main

import (
	"bytes"
	"encoding/json"
	"math"
	"strings"
	"testing"

	"github.com/onegpu/onegpu/platform"
)

// TestTrainChunkedFlags: train --seq 45 --attention chunked=16 --cross-entropy chunked=20 (45 a
// multiple of neither) trains the tiny GPT (float32, no dropout: the same draws either way) to the
// plain run's losses within 1e-5 relative, and says so in its config: the flags reach the step.
func TestTrainChunkedFlags(t *testing.T) {
	t.Setenv(platform.EnvBackend, "")
	t.Setenv(platform.EnvPlugin, "")
	run := func(extra ...string) (config string, losses []float64) {
		var out bytes.Buffer
		args := append([]string{"--preset", "tiny", "--seq", "45", "--batch", "2", "--microbatches", "1", "--dropout", "0", "--policy", "params=float32,compute=float32,output=float32", "--steps", "3", "--json"}, extra...)
		if err := runTrain(args, &out); err != nil {
			t.Fatalf("%v: %v", args, err)
		}
		var r struct {
			Config string
			Steps  []struct{ Loss float64 }
		}
		if err := json.Unmarshal(out.Bytes(), &r); err != nil {
			t.Fatalf("not JSON: %v\n%s", err, out.String())
		}
		for _, s := range r.Steps {
			losses = append(losses, s.Loss)
		}
		return r.Config, losses
	}
	plainConfig, plain := run()
	config, chunked := run("--attention", "chunked=16", "--cross-entropy", "chunked=20")
	if len(plain) != 3 || len(chunked) != 3 {
		t.Fatalf("losses %v and %v, want 3 each", plain, chunked)
	}
	var most float64
	for i := range plain {
		most = max(most, math.Abs(chunked[i]-plain[i])/plain[i])
		if d := math.Abs(chunked[i]-plain[i]) / plain[i]; !(d <= 1e-5) {
			t.Errorf("step %d: chunked loss %.8g, plain %.8g (relative %.2g), want within 1e-5", i+1, chunked[i], plain[i], d)
		}
	}
	t.Logf("largest relative loss difference over 3 steps: %.2g", most)
	if !strings.Contains(config, "batch 2×45 tokens") || !strings.Contains(config, "attention chunked=16, cross-entropy chunked=20") ||
		strings.Contains(plainConfig, "attention") {
		t.Errorf("configs %q and %q: want the sequence and the chunking named, the plain run's without", plainConfig, config)
	}
}
