package train_test

import (
	"strings"
	"testing"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/gomlx/gomlx/pkg/ml/context"
	gomlxlayers "github.com/gomlx/gomlx/pkg/ml/layers"

	"github.com/onegpu/onegpu/accum"
	"github.com/onegpu/onegpu/data"
	"github.com/onegpu/onegpu/internal/testkit"
	"github.com/onegpu/onegpu/mixed"
	"github.com/onegpu/onegpu/optim"
	"github.com/onegpu/onegpu/train"
)

// TestCloseThenStep: after Close a later Step compiles again, as Close's doc says, and continues
// from the trained state: the same loss as a trainer that was never closed (before: "variable
// already exists"). A closed trainer's Run works too.
func TestCloseThenStep(t *testing.T) {
	config := tinyConfig(t)
	config.MicroBatches = 1
	batches, err := data.NewText(data.Corpus, config.Batch, gptOf(config).SeqLen, 1)
	if err != nil {
		t.Fatal(err)
	}
	closed, err := train.New(embedded(), config)
	if err != nil {
		t.Fatal(err)
	}
	defer closed.Close()
	open, err := train.New(embedded(), config)
	if err != nil {
		t.Fatal(err)
	}
	defer open.Close()
	for step := range 2 {
		a, err := closed.Step(batches.Batch(step))
		if err != nil {
			t.Fatalf("step %d after Close: %v", step+1, err)
		}
		b, err := open.Step(batches.Batch(step))
		if err != nil {
			t.Fatal(err)
		}
		if a.Loss != b.Loss || a.Step != b.Step {
			t.Errorf("step %d: loss %v (step %d) after Close, %v (step %d) without", step+1, a.Loss, a.Step, b.Loss, b.Step)
		}
		closed.Close()
	}
	if h, err := closed.Run(batches, train.RunOptions{Steps: 3}); err != nil || len(h.Steps) != 1 {
		t.Errorf("Run after Close: %v, %+v", err, h)
	}
}

// TestNilArgumentsAreErrors: train.New without a backend and Run without data are errors naming
// the argument, not a step that fails in GoMLX ("Failed to convert argument") or a nil
// dereference.
func TestNilArgumentsAreErrors(t *testing.T) {
	config := tinyConfig(t)
	if tr, err := train.New(nil, config); err == nil || !strings.Contains(err.Error(), "train.New: no backend") {
		t.Errorf("train.New(nil, ...) = %v, %v", tr, err)
	}
	tr, err := train.New(testkit.Embedded(), config)
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	if h, err := tr.Run(nil, train.RunOptions{Steps: 1}); err == nil || !strings.Contains(err.Error(), "Trainer.Run: no data") {
		t.Errorf("Run(nil, ...) = %v, %v", h, err)
	}
}

// gomlxModel is a regression model built from GoMLX's own layers (layers.DenseWithBias on a rank-3
// input, LayerNormalization), which compute in their input's dtype and ignore onegpu's precision
// policy.
type gomlxModel struct{}

func (gomlxModel) InputShapes(batch int) []shapes.Shape {
	return []shapes.Shape{shapes.Make(dtypes.Float32, batch, 4, 8), shapes.Make(dtypes.Float32, batch, 4, 8)}
}

func (gomlxModel) Loss(ctx *context.Context, batch []*graph.Node) (accum.Mean, []accum.Mean) {
	h := gomlxlayers.DenseWithBias(ctx.In("dense"), batch[0], 8)
	h = gomlxlayers.LayerNormalization(ctx.In("norm"), h, -1).Done()
	d := graph.Sub(graph.ConvertDType(h, dtypes.Float32), batch[1])
	sum := graph.ReduceAllSum(graph.Mul(d, d))
	return accum.Mean{Sum: sum, Count: graph.Scalar(sum.Graph(), dtypes.Float32, float64(d.Shape().Size()))}, nil
}

func (gomlxModel) MetricNames() []string { return nil }

// TestStepRefusesLayersThePolicyDoesNotReach: under a bfloat16-compute policy, a model of GoMLX's
// own layers (which compute in float32 on a float32 input) is refused at the first step, naming
// each variable computed with as stored: the dense weights and biases, the norm's gain and offset
// (before: it trained in float32, with no word). Under a float32 policy it trains.
func TestStepRefusesLayersThePolicyDoesNotReach(t *testing.T) {
	batch := []*tensors.Tensor{tensors.FromShape(shapes.Make(dtypes.Float32, 2, 4, 8)), tensors.FromShape(shapes.Make(dtypes.Float32, 2, 4, 8))}
	for _, c := range []struct {
		policy string
		want   []string
	}{
		{"params=float32,compute=bfloat16,output=float32", []string{"/dense/dense/weights", "/dense/dense/biases", "/norm/layer_normalization/gain",
			"/norm/layer_normalization/offset", "does not reach layers of the model", "in float32, where the policy computes in bfloat16"}},
		{"float32", nil},
	} {
		policy, err := mixed.ParsePolicy(c.policy)
		if err != nil {
			t.Fatal(err)
		}
		tr, err := train.New(embedded(), train.Config{Model: gomlxModel{}, Batch: 2, Policy: policy, Schedule: optim.Constant(1e-3)})
		if err != nil {
			t.Fatal(err)
		}
		_, err = tr.Step(batch)
		tr.Close()
		if c.want == nil && err != nil {
			t.Errorf("%s: %v", c.policy, err)
		}
		for _, want := range c.want {
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Errorf("%s: %v, want an error containing %q", c.policy, err, want)
			}
		}
	}
}
