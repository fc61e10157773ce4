package train

import (
	"fmt"
	"strings"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/distributed"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/gomlx/gomlx/pkg/ml/context"

	ograph "github.com/onegpu/onegpu/graph"
)

// Shard says which training state is split across devices instead of copied onto each.
type Shard int

const (
	// ShardNone replicates parameters, gradients and optimizer state: plain data parallelism.
	ShardNone Shard = iota
	// ShardOptimizer splits the optimizer state (Adam's moments) across devices (ZeRO-1).
	ShardOptimizer
	// ShardParams splits parameters, gradients and optimizer state (FSDP, ZeRO-3).
	ShardParams
)

var shardNames = []string{"none", "optimizer", "params"}

// String returns the mode's name as --shard spells it.
func (s Shard) String() string {
	if s < 0 || int(s) >= len(shardNames) {
		return fmt.Sprintf("Shard(%d)", int(s))
	}
	return shardNames[s]
}

// ParseShard reads "none" (or ""), "optimizer" or "params".
func ParseShard(s string) (Shard, error) {
	if s == "" {
		return ShardNone, nil
	}
	for i, name := range shardNames {
		if s == name {
			return Shard(i), nil
		}
	}
	return ShardNone, fmt.Errorf("unknown shard mode %q: use none (replicate everything), optimizer (ZeRO-1) or params (FSDP)", s)
}

// Devices says how many devices of the backend a train step runs on, and what they share. The
// step is written once for the whole (global) batch; XLA's SPMD partitioner (Shardy, through
// GoMLX's AutoSharding) splits the batch across the devices and inserts the collectives: the
// all-reduce of the gradients, and for sharded state the all-gathers and reduce-scatters.
//
// Count counts devices of the whole job. Today all of them belong to one process (one PJRT
// client); a multi-process launch would add fields saying which of them this process feeds,
// leaving the meaning of Count, Shard and the global Config.Batch unchanged.
type Devices struct {
	// Count is the number of devices; 0 and 1 mean one device, without partitioning.
	Count int
	// Shard is what is split across the devices rather than replicated.
	Shard Shard
}

// Distributed reports whether the step is partitioned across more than one device.
func (d Devices) Distributed() bool { return d.Count > 1 }

// MeshAxis is the name of the device mesh's only axis: devices split the batch along it, and
// sharded variables their first divisible axis.
const MeshAxis = "data"

// validate checks the devices against the batch, before any work: every device gets the same
// number of examples, split into the same number of micro-batches.
func (d Devices) validate(batch, microBatches int) error {
	if d.Count < 0 {
		return fmt.Errorf("--devices %d: the number of devices must be at least 1", d.Count)
	}
	if d.Shard < ShardNone || d.Shard > ShardParams {
		return fmt.Errorf("unknown shard mode %d: use none, optimizer or params", int(d.Shard))
	}
	if !d.Distributed() {
		if d.Shard != ShardNone {
			return fmt.Errorf("--shard %s needs several devices: add --devices N (N > 1) or use --shard none", d.Shard)
		}
		return nil
	}
	if batch%d.Count != 0 {
		return fmt.Errorf("--devices %d: a batch of %d does not split across %d devices: choose a batch that is a multiple of %d (e.g. %d)",
			d.Count, batch, d.Count, d.Count, (batch/d.Count+1)*d.Count)
	}
	if perDevice := batch / d.Count; perDevice%microBatches != 0 {
		return fmt.Errorf("--devices %d --microbatches %d: each device gets %d examples of the batch of %d, which do not split into %d micro-batches: use a batch that is a multiple of %d",
			d.Count, microBatches, perDevice, batch, microBatches, d.Count*microBatches)
	}
	return nil
}

// CheckBackend returns an error unless backend has at least Count devices; it names the embedded
// backend's limit and what to use instead.
func (d Devices) CheckBackend(backend backends.Backend) error {
	if !d.Distributed() {
		return nil
	}
	have := backend.NumDevices()
	if have >= d.Count {
		return nil
	}
	if !strings.HasPrefix(backend.Name(), "xla") {
		return fmt.Errorf("--devices %d: the embedded backend (%s) has %d device and cannot partition a step: use an XLA PJRT plugin (--backend xla:/abs/path/plugin.so or $%s; the XLA CPU plugin exposes 4 devices)",
			d.Count, backend.Name(), have, ograph.EnvPlugin)
	}
	return fmt.Errorf("--devices %d: the backend %s has only %d device(s): use --devices %d or fewer", d.Count, backend.Name(), have, have)
}

// layout is how one distributed run places its tensors: the mesh, the batch's split and each
// variable's sharding.
type layout struct {
	mesh       *distributed.DeviceMesh
	batch      *distributed.ShardingSpec // axis 0 split across the devices
	replicated *distributed.ShardingSpec
	shard      Shard
}

func newLayout(d Devices) (*layout, error) {
	mesh, err := distributed.NewDeviceMesh([]int{d.Count}, []string{MeshAxis})
	if err != nil {
		return nil, err
	}
	batch, err := distributed.BuildSpec(mesh).S(MeshAxis).Done()
	if err != nil {
		return nil, err
	}
	return &layout{mesh: mesh, batch: batch, replicated: distributed.NewReplicatedShardingSpec(mesh), shard: d.Shard}, nil
}

// inputSpec is the sharding of the step's data inputs: split along the batch axis, or none on
// one device (whose graph has no mesh).
func (l *layout) inputSpec() *distributed.ShardingSpec {
	if l.mesh.NumDevices() == 1 {
		return nil
	}
	return l.batch
}

// isOptimizerState tells the optimizer's per-parameter state (Adam's moments) from the other
// non-trainable variables: step counters and loss scales are scalars, the random state is GoMLX's
// own.
func isOptimizerState(v *context.Variable) bool {
	return !v.Trainable && v.Shape().Rank() > 0 && v.Name() != context.RNGStateVariableName
}

// sharded reports whether the layout splits v across the devices rather than copying it.
func (l *layout) sharded(v *context.Variable) bool {
	switch l.shard {
	case ShardParams:
		return v.Trainable || isOptimizerState(v)
	case ShardOptimizer:
		return isOptimizerState(v)
	}
	return false
}

// spec returns v's sharding: split along its first axis that divides evenly across the devices
// when the layout shards it, replicated otherwise (and for tensors no axis of which divides).
func (l *layout) spec(v *context.Variable) *distributed.ShardingSpec {
	if !l.sharded(v) {
		return l.replicated
	}
	return l.specFor(v.Shape())
}

func (l *layout) specFor(s shapes.Shape) *distributed.ShardingSpec {
	n := l.mesh.NumDevices()
	for axis, dim := range s.Dimensions {
		if dim%n != 0 {
			continue
		}
		// Every axis is named, so that ShardShape and ShardTensor see the tensor's full rank.
		b := distributed.BuildSpec(l.mesh)
		for other := range s.Rank() {
			if other == axis {
				b.S(MeshAxis)
			} else {
				b.R()
			}
		}
		spec, err := b.Done()
		if err != nil {
			panic(err) // the mesh has the axis: cannot happen
		}
		return spec
	}
	return l.replicated
}

// assign gives every variable of ctx its sharding. It must run before the step's graph is built,
// since GoMLX reads a variable's sharding when it creates its parameter, and before any value is
// split into shards (a variable loaded from a checkpoint holds its whole value until then).
func (l *layout) assign(ctx *context.Context) error {
	for v := range ctx.IterVariables() {
		if err := v.SetShardingSpec(l.spec(v)); err != nil {
			return err
		}
	}
	return nil
}

// createVariables builds the step once on a throwaway graph, so that every variable the step uses
// (weights, optimizer moments, counters) exists in ctx, with its shape, before the real step is
// built: their shardings have to be set first. Nothing is compiled or run.
func createVariables(backend backends.Backend, ctx *context.Context, inputs []shapes.Shape,
	fn func(ctx *context.Context, inputs []*graph.Node) []*graph.Node) error {
	p, err := ograph.ContextProgram(backend, ctx, "create_variables", inputs, fn)
	if err != nil {
		return err
	}
	p.Graph.Finalize()
	return nil
}

// distributedExec prepares the distributed step: variables created and sharded, the executor
// configured for XLA's auto-sharding with the batch split along axis 0 and replicated outputs.
func (t *Trainer) distributedExec() (*context.Exec, error) {
	l, err := newLayout(t.Config.Devices)
	if err != nil {
		return nil, err
	}
	ctx := t.Ctx.Checked(false)
	if err := createVariables(t.Backend, ctx, t.InputShapes(), t.StepFn()); err != nil {
		return nil, err
	}
	if err := l.assign(ctx); err != nil {
		return nil, err
	}
	step := ograph.AliasUpdatedState(t.StepFn())
	var exec *context.Exec
	exec, err = context.NewExec(t.Backend, ctx, func(ctx *context.Context, inputs []*graph.Node) []*graph.Node {
		outputs := step(ctx, inputs)
		exec.WithOutputShardingSpecs(l.outputSpecs(ctx, inputs[0].Graph(), len(outputs))...)
		return outputs
	})
	if err != nil {
		return nil, err
	}
	exec.AutoSharding(l.mesh)
	batchSpecs := make([]*distributed.ShardingSpec, len(t.InputShapes()))
	for i := range batchSpecs {
		batchSpecs[i] = l.batch
	}
	exec.WithInputShardingSpecs(batchSpecs...)
	t.layout = l
	return exec, nil
}

// outputSpecs are the shardings of the step's outputs as GoMLX's context.Exec orders them: the new
// values of the variables the step changed, in context order, each as its variable is sharded,
// then the step's own outputs (loss and metrics), replicated. XLA is told them explicitly, since
// the shards it returns become the variables' next values.
func (l *layout) outputSpecs(ctx *context.Context, g *graph.Graph, numOutputs int) []*distributed.ShardingSpec {
	var specs []*distributed.ShardingSpec
	ctx.EnumerateVariables(func(v *context.Variable) {
		if v.ChangedInGraph(g) {
			specs = append(specs, l.spec(v))
		}
	})
	for range numOutputs {
		specs = append(specs, l.replicated)
	}
	return specs
}

// distributedArgs splits each batch tensor along axis 0 into one shard per device.
func (l *layout) distributedArgs(batch []*tensors.Tensor) ([]any, error) {
	args := make([]any, len(batch))
	for i, b := range batch {
		dt, err := distributed.ShardTensor(l.batch, b)
		if err != nil {
			return nil, fmt.Errorf("splitting input #%d (%s) across %d devices: %w", i, b.Shape(), l.mesh.NumDevices(), err)
		}
		args[i] = dt
	}
	return args, nil
}

// newExec returns the step's executor: on one device GoMLX's plain context.Exec, on several the
// auto-sharded one.
func (t *Trainer) newExec() (*context.Exec, error) {
	if t.Config.Devices.Distributed() {
		return t.distributedExec()
	}
	return context.NewExec(t.Backend, t.Ctx, ograph.AliasUpdatedState(t.StepFn()))
}

// stepArgs turns a batch into the step's arguments: the tensors themselves on one device, split
// into one shard per device on several.
func (t *Trainer) stepArgs(batch []*tensors.Tensor) ([]any, error) {
	if t.layout != nil {
		return t.layout.distributedArgs(batch)
	}
	args := make([]any, len(batch))
	for i, b := range batch {
		args[i] = b
	}
	return args, nil
}
