package main

import (
	"math"
	"testing"

	"github.com/gomlx/gomlx/pkg/core/tensors"

	"github.com/onegpu/onegpu/data"
	"github.com/onegpu/onegpu/internal/testkit"
	"github.com/onegpu/onegpu/train"
)

// TestSignSGDThroughRun: the model trains with signSGD through Run (the loss falls below a fifth
// in 40 steps), and one step moves every parameter by exactly the learning rate, or not at all
// where its gradient is 0: signSGD's rule, checked in float64 on the weights before and after.
func TestSignSGDThroughRun(t *testing.T) {
	backend := testkit.Embedded()
	config := Setup()
	batches, err := data.NewClassifierBatch(config.Batch, 128, 10, 1)
	if err != nil {
		t.Fatal(err)
	}
	trainer, err := train.New(backend, config)
	if err != nil {
		t.Fatal(err)
	}
	defer trainer.Close()
	if err := trainer.Initialize(); err != nil {
		t.Fatal(err)
	}
	before := weights(trainer)
	if _, err := trainer.Step(batches.Batch(0)); err != nil {
		t.Fatal(err)
	}
	lr := float64(float32(config.Schedule.At(0)))
	moved := 0
	for name, after := range weights(trainer) {
		for i, w := range after {
			switch d := math.Abs(w - before[name][i]); {
			case d == 0:
			case math.Abs(d-lr) <= 1e-7*math.Max(1, math.Abs(w)):
				moved++
			default:
				t.Fatalf("%s[%d] moved by %g, want %g (the learning rate) or 0", name, i, d, lr)
			}
		}
	}
	if moved == 0 {
		t.Fatal("no parameter moved")
	}
	h, err := trainer.Run(batches, train.RunOptions{Steps: 40})
	if err != nil {
		t.Fatal(err)
	}
	first, last := h.Steps[0].Loss, h.Steps[len(h.Steps)-1].Loss
	if h.Resumed != 1 || !(last < first/5) {
		t.Errorf("from step %d, loss %.4f -> %.4f: want a fall below a fifth", h.Resumed, first, last)
	}
	if r := train.Record(config); r.Optimizer != "signsgd, loss scale none" {
		t.Errorf("a checkpoint records the optimizer as %q", r.Optimizer)
	}
}

// weights returns the trainable variables' values by name, in float64.
func weights(t *train.Trainer) map[string][]float64 {
	out := map[string][]float64{}
	for v := range t.Ctx.IterVariables() {
		if v.Trainable {
			for _, x := range tensors.MustCopyFlatData[float32](v.MustValue()) {
				out[v.ScopeAndName()] = append(out[v.ScopeAndName()], float64(x))
			}
		}
	}
	return out
}
