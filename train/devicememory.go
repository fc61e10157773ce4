package train

import (
	"fmt"

	"github.com/gomlx/gomlx/pkg/core/distributed"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/ml/context"

	ograph "github.com/onegpu/onegpu/graph"
)

// StateBytes is the training state by kind, in bytes: either the whole of it or what one device
// holds.
type StateBytes struct {
	Params         int64 `json:"params"`
	OptimizerState int64 `json:"optimizer_state"`
	// Other is the rest of the state: step counters, loss scale, learning rate, random state.
	Other int64 `json:"other"`
}

// DeviceProgram is the train step partitioned across devices, built and compiled by XLA but not
// run: what one device holds of the state, and XLA's compiled statistics for one device.
type DeviceProgram struct {
	Devices Devices
	// Program is the step's logical (whole-batch) graph, compiled for the devices.
	Program *ograph.Program
	// Total is the whole state; PerDevice what one device holds of it (the largest shard).
	Total, PerDevice StateBytes
	// Compiled is XLA's memory account of the partitioned step, for one device.
	Compiled ograph.CompiledMemory
}

// DeviceProgram builds the train step for t.Config.Devices in a fresh context (the trainer's own
// state is untouched), shards its variables, compiles it with XLA's SPMD partitioner and returns
// what one device holds. It needs an XLA backend with enough devices; one device gives the plain
// step's figures. Finalize the returned Program's graph when done.
func (t *Trainer) DeviceProgram() (*DeviceProgram, error) {
	d := t.Config.Devices
	if d.Count < 1 {
		d.Count = 1
	}
	ctx := context.New()
	inputs := t.InputShapes()
	if err := createVariables(t.Backend, ctx, inputs, t.StepFn()); err != nil {
		return nil, err
	}
	l, err := newLayout(d)
	if err != nil {
		return nil, err
	}
	if err := l.assign(ctx); err != nil {
		return nil, err
	}
	g := graph.NewGraph(t.Backend, "train_step")
	if d.Distributed() {
		if err := g.SetAutoSharding(l.mesh); err != nil {
			g.Finalize()
			return nil, err
		}
	}
	p, err := ograph.ContextProgramOn(g, ctx.Checked(false), func(g *graph.Graph) []*graph.Node {
		nodes := make([]*graph.Node, len(inputs))
		for i, s := range inputs {
			nodes[i] = graph.ShardedParameter(g, fmt.Sprintf("input_%d", i), s, l.inputSpec())
		}
		return nodes
	}, t.StepFn())
	if err != nil {
		g.Finalize()
		return nil, err
	}
	// ContextProgramOn appends the changed variables' new values after the step's outputs, in
	// context order.
	specs := make([]*distributed.ShardingSpec, 0, len(p.Outputs))
	for len(specs) < len(p.Outputs)-countChanged(ctx, g) {
		specs = append(specs, l.replicated)
	}
	for v := range ctx.IterVariables() {
		if v.InUseByGraph(g) && v.ChangedInGraph(g) {
			specs = append(specs, l.spec(v))
		}
	}
	if !d.Distributed() {
		specs = nil
	}
	if err := ograph.CatchPanic(func() { g.CompileWithSharding(p.Outputs, specs) }); err != nil {
		g.Finalize()
		return nil, fmt.Errorf("compiling the step for %d devices: %w", d.Count, err)
	}
	compiled, err := ograph.CompiledMemoryOf(g)
	if err != nil {
		g.Finalize()
		return nil, err
	}
	dp := &DeviceProgram{Devices: d, Program: p, Compiled: compiled}
	for v := range ctx.IterVariables() {
		if !v.InUseByGraph(g) {
			continue
		}
		whole := int64(v.Shape().Memory())
		shard := int64(l.spec(v).ShardShape(v.Shape()).Memory())
		switch {
		case v.Trainable:
			dp.Total.Params += whole
			dp.PerDevice.Params += shard
		case isOptimizerState(v):
			dp.Total.OptimizerState += whole
			dp.PerDevice.OptimizerState += shard
		default:
			dp.Total.Other += whole
			dp.PerDevice.Other += shard
		}
	}
	return dp, nil
}

func countChanged(ctx *context.Context, g *graph.Graph) int {
	n := 0
	for v := range ctx.IterVariables() {
		if v.InUseByGraph(g) && v.ChangedInGraph(g) {
			n++
		}
	}
	return n
}

// PerDeviceBreakdown scales a breakdown of the whole step's memory at its peak (graph.Analyze's,
// indexed by graph.Kind) to what one device holds: parameters and optimizer state by their shards,
// gradients split like the parameters (XLA reduce-scatters them to the parameters' sharding) or
// whole when parameters are replicated (all-reduced), activations by the batch split; the rest
// whole.
func (dp *DeviceProgram) PerDeviceBreakdown(whole map[ograph.Kind]int64) map[ograph.Kind]int64 {
	ratio := func(part, all int64) float64 {
		if all == 0 {
			return 1
		}
		return float64(part) / float64(all)
	}
	n := float64(max(dp.Devices.Count, 1))
	scale := map[ograph.Kind]float64{
		ograph.Parameters:     ratio(dp.PerDevice.Params, dp.Total.Params),
		ograph.OptimizerState: ratio(dp.PerDevice.OptimizerState, dp.Total.OptimizerState),
		ograph.Gradients:      1,
		ograph.Activations:    1 / n,
		ograph.Other:          1,
	}
	if dp.Devices.Shard == ShardParams {
		scale[ograph.Gradients] = scale[ograph.Parameters]
	}
	out := map[ograph.Kind]int64{}
	for k, b := range whole {
		out[k] = int64(float64(b) * scale[k])
	}
	return out
}
