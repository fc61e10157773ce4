package main

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"testing"
)

// FuzzSetupFlags: reading the flags that train, memory, bench, plan and compare share never
// panics, and a command line it accepts gives a config that validates, with every number given
// on it honored and finite. Seeds are below and in testdata/fuzz/FuzzSetupFlags; `go test` runs
// them, `go test -fuzz FuzzSetupFlags ./cmd/onegpu` searches further.
func FuzzSetupFlags(f *testing.F) {
	for _, seed := range []string{
		"",
		"--model mlp --microbatches 4 --dropout 0",
		"--microbatches 0",
		"--policy=",
		"--batch -1 --lr NaN",
		"mlp --steps 1",
		"--preset tutorial --remat block --remat-policy dots_saveable --batch 64 --microbatches 16",
		"--model mlp --preset small",
		"--lr 1e308 --dropout 0.999999",
		"--batch 9223372036854775807 --microbatches 1",
		"--loss-scale static=0 --seed 18446744073709551615",
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, line string) {
		args := strings.Fields(line)
		s, err := parseSetup("fuzz", args)
		if err != nil {
			return
		}
		c, err := s.config()
		if err != nil {
			return
		}
		if err := c.Validate(); err != nil {
			t.Fatalf("%q: config accepted, but Validate says %v", line, err)
		}
		set := s.given()
		if set["batch"] && c.Batch != s.batch || set["microbatches"] && c.MicroBatches != s.microBatches {
			t.Fatalf("%q: batch %d in %d micro-batches, not what was given", line, c.Batch, c.MicroBatches)
		}
		if set["lr"] && c.Schedule.At(1000) > s.learningRate {
			t.Fatalf("%q: learning rate %g after warm-up, above the peak given, %g", line, c.Schedule.At(1000), s.learningRate)
		}
		for _, v := range []float64{c.Schedule.At(0), c.Schedule.At(1000), c.ClipNorm} {
			if math.IsNaN(v) || math.IsInf(v, 0) {
				t.Fatalf("%q: a non-finite number in %+v", line, c)
			}
		}
		if !strings.Contains(describe(c), fmt.Sprint(c.Batch)) {
			t.Fatalf("%q: the description %q lacks the batch", line, describe(c))
		}
		if c.Batch < 1 || c.MicroBatches < 1 || c.Batch%c.MicroBatches != 0 {
			t.Fatalf("%q: batch %d in %d micro-batches", line, c.Batch, c.MicroBatches)
		}
		_ = describe(c) + strconv.Itoa(c.Batch)
	})
}
