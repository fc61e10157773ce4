package train_test

import (
	"bytes"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/gomlx/gomlx/pkg/ml/context"

	"github.com/onegpu/onegpu/accum"
	ograph "github.com/onegpu/onegpu/graph"
	"github.com/onegpu/onegpu/layers"
	"github.com/onegpu/onegpu/remat"
	"github.com/onegpu/onegpu/train"
)

// twoLayer is a model of a user's own: a residual block over a Dense layer, mean squared error,
// with a "close" metric (share of predictions within 0.5).
type twoLayer struct{}

func (twoLayer) InputShapes(batch int) []shapes.Shape {
	return []shapes.Shape{shapes.Make(dtypes.Float32, batch, 6), shapes.Make(dtypes.Float32, batch, 1)}
}

func (twoLayer) MetricNames() []string { return []string{"close"} }

func (twoLayer) Loss(ctx *context.Context, b []*graph.Node) (accum.Mean, []accum.Mean) {
	h := layers.Dense(ctx.In("in"), b[0], 8)
	h = graph.Add(h, remat.Block(ctx.In("block"), "block", func(ctx *context.Context, in []*graph.Node) []*graph.Node {
		return []*graph.Node{layers.Dense(ctx.In("inner"), layers.GELU(layers.LayerNorm(ctx.In("norm"), in[0])), 8)}
	}, h)[0])
	y := graph.ConvertDType(layers.Dense(ctx.In("out"), h, 1), dtypes.Float32)
	diff := graph.Sub(y, b[1])
	close := graph.ConvertDType(graph.LessThan(graph.Abs(diff), graph.Scalar(diff.Graph(), dtypes.Float32, 0.5)), dtypes.Float32)
	return accum.MaskedMean(graph.Square(diff), nil), []accum.Mean{accum.MaskedMean(close, nil)}
}

type sines struct{}

func (sines) Batch(step int) []*tensors.Tensor {
	x, y := make([]float32, 8*6), make([]float32, 8)
	for i := range x {
		x[i] = float32(((step*31+i*7)%13)-6) / 6
	}
	for i := range y {
		y[i] = x[i*6] - x[i*6+3]
	}
	return []*tensors.Tensor{tensors.FromFlatDataAndDimensions(x, 8, 6), tensors.FromFlatDataAndDimensions(y, 8, 1)}
}

func (sines) Describe() string { return "sines" }

func ownConfig() train.Config {
	return train.Config{Batch: 8, MicroBatches: 2, RematBlocks: []string{"block"}, LossScale: "dynamic", Seed: 3,
		Schedule: train.Schedule{Init: 1e-2, Peak: 1e-2, TransitionSteps: 1, DecayRate: 1}}
}

// TestOwnModelResumes: a user's model trains through the loop with micro-batches, remat of its
// named block and a loss scale; its metric is reported by name; 4 steps in one go and 2 + a
// checkpoint + 2 give identical results; Program builds its step for Analyze with the block
// checkpointed once per micro-batch.
func TestOwnModelResumes(t *testing.T) {
	var progress bytes.Buffer
	run := func(dir string, steps int) []train.StepMetrics {
		tr, err := train.NewFor(embedded(), twoLayer{}, ownConfig())
		if err != nil {
			t.Fatal(err)
		}
		defer tr.Close()
		h, err := tr.Run(sines{}, train.RunOptions{Steps: steps, CheckpointDir: dir, Progress: &progress})
		if err != nil {
			t.Fatal(err)
		}
		return h.Steps
	}
	straight := run(filepath.Join(t.TempDir(), "straight"), 4)
	dir := filepath.Join(t.TempDir(), "resumed")
	resumed := append(run(dir, 2), run(dir, 4)...)
	if !reflect.DeepEqual(straight, resumed) {
		t.Errorf("uninterrupted %+v\nresumed %+v", straight, resumed)
	}
	if _, ok := straight[0].Metrics["close"]; !ok || straight[3].Loss >= straight[0].Loss || straight[3].Count != 8 {
		t.Errorf("steps %+v: want the metric \"close\", a falling loss and 8 examples counted", straight)
	}

	if out := progress.String(); !strings.Contains(out, "step    4/4  loss ") || !strings.Contains(out, "  close 0.") ||
		!strings.Contains(out, "examples/s") || !strings.Contains(out, "resuming from step 2") {
		t.Errorf("progress lines:\n%s", out)
	}

	tr, err := train.NewFor(embedded(), twoLayer{}, ownConfig())
	if err != nil {
		t.Fatal(err)
	}
	p, err := tr.Program()
	if err != nil {
		t.Fatal(err)
	}
	defer p.Graph.Finalize()
	report, err := remat.Residuals(p)
	if err != nil || len(report.Blocks) != 2 {
		t.Errorf("remat.Residuals of the step: %d blocks, %v; want 2 (one per micro-batch)", len(report.Blocks), err)
	}
	if m := ograph.Analyze(p); m.PeakBytes <= 0 {
		t.Errorf("Analyze: peak %d", m.PeakBytes)
	}
}

// TestNewForErrors: what cannot work is an error naming it, before anything runs.
func TestNewForErrors(t *testing.T) {
	odd := ownConfig()
	odd.MicroBatches = 3
	empty := ownConfig()
	empty.RematBlocks = []string{""}
	for _, tc := range []struct {
		model  train.Model
		config train.Config
		want   string
	}{
		{nil, ownConfig(), "no model"},
		{twoLayer{}, odd, "does not split into 3"},
		{twoLayer{}, empty, "a block name is empty"},
	} {
		_, err := train.NewFor(embedded(), tc.model, tc.config)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("NewFor(%v, %+v): %v, want an error containing %q", tc.model, tc.config, err, tc.want)
		}
	}
}
