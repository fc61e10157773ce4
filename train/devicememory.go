package train

import (
	"fmt"

	"github.com/gomlx/gomlx/pkg/core/distributed"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/ml/context"

	"github.com/onegpu/onegpu/analysis"
	"github.com/onegpu/onegpu/internal/panics"
)

// StateBytes is the training state by kind, in bytes: either the whole of it or what one device
// holds.
type StateBytes struct {
	// Params are the trainable weights; FrozenWeights the weights training does not change
	// (graph.FreezeVariable), never sharded.
	Params         int64 `json:"params"`
	FrozenWeights  int64 `json:"frozen_weights,omitempty"`
	OptimizerState int64 `json:"optimizer_state"`
	// Other is the rest of the state: step counters, loss scale, learning rate, random state.
	Other int64 `json:"other"`
}

// DeviceProgram is the train step partitioned across devices, built and compiled by XLA but not
// run: what one device holds of the state, and XLA's compiled statistics for one device.
type DeviceProgram struct {
	Devices Devices
	// Program is the step's logical (whole-batch) graph, compiled for the devices.
	Program *analysis.Program
	// Total is the whole state; PerDevice what one device holds of it (the largest shard).
	Total, PerDevice StateBytes
	// Compiled is XLA's memory account of the partitioned step, for one device.
	Compiled analysis.CompiledMemory
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
	inputs := t.StepShapes()
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
	p, err := analysis.ContextProgramOn(g, ctx.Checked(false), func(g *graph.Graph) []*graph.Node {
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
			specs = append(specs, l.spec(ctx, v))
		}
	}
	if !d.Distributed() {
		specs = nil
	}
	if err := panics.Catch(func() { g.CompileWithSharding(p.Outputs, specs) }); err != nil {
		g.Finalize()
		return nil, fmt.Errorf("compiling the step for %d devices: %w", d.Count, err)
	}
	compiled, err := analysis.CompiledMemoryOf(g)
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
		shard := int64(l.spec(ctx, v).ShardShape(v.Shape()).Memory())
		switch analysis.VariableRole(ctx, v) {
		case analysis.RoleTrainable:
			dp.Total.Params += whole
			dp.PerDevice.Params += shard
		case analysis.RoleFrozen:
			dp.Total.FrozenWeights += whole
			dp.PerDevice.FrozenWeights += shard
		case analysis.RoleOptimizerState:
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

// Share is the fraction of the whole step's bytes of kind k that one device holds at the peak:
// parameters and optimizer state split when sharded, gradients split like the parameters (XLA
// reduce-scatters them to the parameters' sharding) or whole when parameters are replicated
// (all-reduced), activations split with the batch, the rest whole. It assumes every sharded tensor
// has an axis that divides across the devices; DeviceProgram.PerDeviceBreakdown uses the exact
// shapes of the shards.
func (d Devices) Share(k analysis.Kind) float64 {
	if !d.Distributed() {
		return 1
	}
	split := 1 / float64(d.Count)
	switch {
	case k == analysis.Activations:
		return split
	case k == analysis.OptimizerState && d.Shard != ShardNone:
		return split
	case (k == analysis.Parameters || k == analysis.Gradients) && d.Shard == ShardParams:
		return split
	}
	return 1
}

// PerDeviceBreakdown scales a breakdown of the whole step's memory at its peak (analysis.Analyze's)
// to what one device holds, as Share does but with the exact shares of parameters and optimizer
// state from the shapes of their shards.
func (dp *DeviceProgram) PerDeviceBreakdown(whole map[analysis.Kind]int64) map[analysis.Kind]int64 {
	ratio := func(part, all int64) float64 {
		if all == 0 {
			return 1
		}
		return float64(part) / float64(all)
	}
	out := map[analysis.Kind]int64{}
	for k, b := range whole {
		share := dp.Devices.Share(k)
		switch k {
		case analysis.Parameters:
			share = ratio(dp.PerDevice.Params, dp.Total.Params)
		case analysis.OptimizerState:
			share = ratio(dp.PerDevice.OptimizerState, dp.Total.OptimizerState)
		case analysis.Gradients:
			if dp.Devices.Shard == ShardParams {
				share = ratio(dp.PerDevice.Params, dp.Total.Params)
			}
		}
		out[k] = int64(float64(b) * share)
	}
	return out
}
