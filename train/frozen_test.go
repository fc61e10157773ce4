package train_test

import (
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/gomlx/gomlx/pkg/ml/context"

	"github.com/onegpu/onegpu/accum"
	"github.com/onegpu/onegpu/analysis"
	"github.com/onegpu/onegpu/data"
	"github.com/onegpu/onegpu/internal/testkit"
	"github.com/onegpu/onegpu/layers"
	"github.com/onegpu/onegpu/mixed"
	"github.com/onegpu/onegpu/optim"
	"github.com/onegpu/onegpu/train"
)

// frozenModel classifies Inputs features into Classes through a frozen base and a trainable head:
// h = tanh(x·base - codes/128), logits = Dense(h). base (float32 [Inputs, Hidden]) and codes
// (uint8 [Hidden], as quantized weights are stored) are frozen weights (graph.FreezeVariable) with
// fixed values; the head trains. It is what an adapter on a frozen base needs of the trainer.
type frozenModel struct {
	Inputs, Hidden, Classes int
}

func (m frozenModel) InputShapes(batch int) []shapes.Shape {
	return []shapes.Shape{shapes.Make(dtypes.Float32, batch, m.Inputs), shapes.Make(dtypes.Int32, batch)}
}

func (m frozenModel) MetricNames() []string { return nil }

func (m frozenModel) Loss(ctx *context.Context, batch []*graph.Node) (accum.Mean, []accum.Mean) {
	x, labels := batch[0], batch[1]
	g := x.Graph()
	base := analysis.FreezeVariable(ctx, ctx.In("base").VariableWithValue("weights", m.base()))
	codes := analysis.FreezeVariable(ctx, ctx.In("base").VariableWithValue("codes", m.codes()))
	offset := graph.DivScalar(graph.ConvertDType(codes.ValueGraph(g), dtypes.Float32), 128)
	h := graph.Tanh(graph.Sub(graph.MatMul(x, base.ValueGraph(g)), graph.ExpandAxes(offset, 0)))
	logits := layers.Dense(ctx.In("head"), h, m.Classes)
	sum, count := mixed.SoftmaxCrossEntropySum(logits, labels, nil)
	return accum.Mean{Sum: sum, Count: count}, nil
}

// base and codes are the frozen weights' fixed values.
func (m frozenModel) base() *tensors.Tensor {
	values := make([]float32, m.Inputs*m.Hidden)
	for i := range values {
		values[i] = float32(math.Sin(float64(i)*0.7)) / 2
	}
	return tensors.FromFlatDataAndDimensions(values, m.Inputs, m.Hidden)
}

func (m frozenModel) codes() *tensors.Tensor {
	values := make([]uint8, m.Hidden)
	for i := range values {
		values[i] = uint8(37 * i)
	}
	return tensors.FromFlatDataAndDimensions(values, m.Hidden)
}

func frozenConfig() train.Config {
	return train.Config{Model: frozenModel{Inputs: 8, Hidden: 16, Classes: 4}, Batch: 16, MicroBatches: 2, Policy: mixed.Float32,
		Schedule: optim.Constant(1e-2), Seed: 3}
}

// frozenValues reads the frozen weights of a trainer's context.
func frozenValues(t *testing.T, tr *train.Trainer) (base []float32, codes []uint8) {
	t.Helper()
	read := func(name string) *tensors.Tensor {
		v := tr.Ctx.InspectVariable("/base", name)
		if v == nil {
			t.Fatalf("no variable /base/%s", name)
		}
		if v.Trainable || analysis.VariableRole(tr.Ctx, v) != analysis.RoleFrozen {
			t.Errorf("/base/%s: trainable %v, role %s; want a frozen weight", name, v.Trainable, analysis.VariableRole(tr.Ctx, v))
		}
		return v.MustValue()
	}
	return tensors.MustCopyFlatData[float32](read("weights")), tensors.MustCopyFlatData[uint8](read("codes"))
}

// TestFrozenWeights: a model with frozen weights (a float32 matrix and uint8 codes) trains, on the
// device and with the optimizer offloaded: its loss falls, its frozen weights are bit-identical
// after 5 steps, the optimizer keeps state for the head only, the step's analysis reports them as
// frozen weights (not optimizer state), and a run resumed at step 3 ends bit-identical to an
// uninterrupted one. A checkpoint of a model with another frozen shape is refused by naming it.
func TestFrozenWeights(t *testing.T) {
	backend := testkit.Embedded()
	batches, err := data.NewClassifierBatch(16, 8, 4, 5)
	if err != nil {
		t.Fatal(err)
	}
	m := frozenConfig().Model.(frozenModel)
	wantBase, wantCodes := tensors.MustCopyFlatData[float32](m.base()), tensors.MustCopyFlatData[uint8](m.codes())
	run := func(config train.Config, to int, dir string) (*train.Trainer, *train.History) {
		t.Helper()
		return runOn(t, backend, config, batches, to, dir)
	}
	whole, h := run(frozenConfig(), 5, "")
	defer whole.Close()
	first, last := h.Steps[0].Loss, h.Steps[len(h.Steps)-1].Loss
	if !(last < first) {
		t.Errorf("loss %.4f -> %.4f over 5 steps: the head should learn", first, last)
	}
	base, codes := frozenValues(t, whole)
	if !slices.Equal(base, wantBase) || !slices.Equal(codes, wantCodes) {
		t.Errorf("the frozen weights changed in training")
	}
	// The optimizer's state: Adam's two moments of the head's kernel and bias, nothing for the base.
	var state, head int64
	for v := range whole.Ctx.IterVariables() {
		switch analysis.VariableRole(whole.Ctx, v) {
		case analysis.RoleOptimizerState:
			state += int64(v.Shape().Memory())
			if strings.Contains(v.ScopeAndName(), "base") {
				t.Errorf("optimizer state %s for the frozen base", v.ScopeAndName())
			}
		case analysis.RoleTrainable:
			head += int64(v.Shape().Memory())
		}
	}
	if want := int64(4 * (16*4 + 4)); head != want || state != 2*head {
		t.Errorf("trainable %d bytes (want %d), optimizer state %d bytes (want Adam's 2x)", head, want, state)
	}

	// The step's analysis: the frozen weights are their own kind, alive at the peak.
	p, err := whole.Program()
	if err != nil {
		t.Fatal(err)
	}
	frozen := 0
	for id := range p.Frozen {
		if p.State[id] || p.Trainable[id] {
			t.Errorf("parameter #%d is frozen and state or trainable", id)
		}
		frozen++
	}
	mem := analysis.Analyze(p)
	p.Graph.Finalize()
	if want := int64(4*8*16 + 16); frozen != 2 || mem.Breakdown[analysis.FrozenWeights] < want {
		t.Errorf("the step has %d frozen parameters (want 2), %d bytes of frozen weights at the peak (want at least %d)", frozen,
			mem.Breakdown[analysis.FrozenWeights], want)
	}

	// The optimizer offloaded: the same losses, the frozen weights unchanged.
	offload := frozenConfig()
	offload.Offload = train.OffloadOptimizer
	offloaded, ho := run(offload, 5, "")
	defer offloaded.Close()
	for i := range h.Steps {
		if ho.Steps[i].Loss != h.Steps[i].Loss {
			t.Errorf("step %d: loss %.9g with the optimizer offloaded, %.9g on the device", i+1, ho.Steps[i].Loss, h.Steps[i].Loss)
		}
	}
	if base, codes := frozenValues(t, offloaded); !slices.Equal(base, wantBase) || !slices.Equal(codes, wantCodes) {
		t.Errorf("the frozen weights changed with the optimizer offloaded")
	}

	// Resumed at step 3: the same losses and weights as the uninterrupted run.
	dir := t.TempDir()
	early, _ := run(frozenConfig(), 3, dir)
	early.Close()
	resumed, hr := run(frozenConfig(), 5, dir)
	defer resumed.Close()
	if hr.Resumed != 3 || len(hr.Steps) != 2 || hr.Steps[1].Loss != last {
		t.Errorf("resumed at %d, %d steps, last loss %.9g; want resumed at 3, 2 steps, loss %.9g", hr.Resumed, len(hr.Steps),
			hr.Steps[len(hr.Steps)-1].Loss, last)
	}
	if base, codes := frozenValues(t, resumed); !slices.Equal(base, wantBase) || !slices.Equal(codes, wantCodes) {
		t.Errorf("the frozen weights changed across a resume")
	}

	// A checkpoint of another frozen shape (and another head) names both weights.
	other := frozenConfig()
	other.Model = frozenModel{Inputs: 8, Hidden: 12, Classes: 4}
	tr, err := train.New(backend, other)
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	_, err = tr.Run(batches, train.RunOptions{Steps: 5, CheckpointDir: dir})
	if err == nil || !strings.Contains(err.Error(), "/base/weights") || !strings.Contains(err.Error(), "/head/") {
		t.Errorf("resuming a model of other sizes: %v; want an error naming /base/weights and the head's weights", err)
	}
}

// TestFrozenWeightsNotSharded: across 2 devices with --shard params, the trainable head and its
// optimizer state are split, the frozen weights are copied whole to each device and not counted
// as optimizer state.
func TestFrozenWeightsNotSharded(t *testing.T) {
	backend := fourDevices(t)
	defer backend.Finalize()
	config := frozenConfig()
	config.Devices = train.Devices{Count: 2, Shard: train.ShardParams}
	tr, err := train.New(backend, config)
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	dp, err := tr.DeviceProgram()
	if err != nil {
		t.Fatal(err)
	}
	defer dp.Program.Graph.Finalize()
	frozen, head := int64(4*8*16+16), int64(4*(16*4+4))
	if dp.Total.FrozenWeights != frozen || dp.PerDevice.FrozenWeights != frozen {
		t.Errorf("frozen weights %d bytes in all, %d per device; want %d both (copied whole)", dp.Total.FrozenWeights,
			dp.PerDevice.FrozenWeights, frozen)
	}
	if dp.Total.Params != head || dp.Total.OptimizerState != 2*head || dp.PerDevice.Params != head/2 || dp.PerDevice.OptimizerState != head {
		t.Errorf("state %+v in all, %+v per device; want the head's %d bytes and Adam's 2x, halved per device", dp.Total, dp.PerDevice, head)
	}
}
