package train

import (
	"fmt"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/distributed"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/gomlx/gomlx/pkg/ml/context"

	"github.com/onegpu/onegpu/accum"
	"github.com/onegpu/onegpu/analysis"
	"github.com/onegpu/onegpu/platform"
)

// spmdExecutor runs the step on Config.Devices.Count devices of an XLA backend: the step is
// written once for the whole batch, and XLA's SPMD partitioner (GoMLX's AutoSharding) splits the
// batch along axis 0 and places each variable as the layout says, inserting the collectives.
type spmdExecutor struct {
	t      *Trainer
	layout *layout
	exec   *context.Exec
}

func (e *spmdExecutor) DeviceStep() accum.StepFn { return e.t.StepFn() }

// prepare creates and shards the variables and configures the executor for XLA's auto-sharding,
// with the batch split along axis 0 and replicated outputs.
func (e *spmdExecutor) prepare() error {
	t := e.t
	l, err := newLayout(t.Config.Devices)
	if err != nil {
		return err
	}
	ctx := t.Ctx.Checked(false)
	if err := createVariables(t.Backend, ctx, t.InputShapes(), t.StepFn()); err != nil {
		return err
	}
	if err := l.assign(ctx); err != nil {
		return err
	}
	step := platform.AliasUpdatedState(t.StepFn())
	var exec *context.Exec
	exec, err = context.NewExec(t.Backend, ctx, func(ctx *context.Context, inputs []*graph.Node) []*graph.Node {
		outputs := step(ctx, inputs)
		exec.WithOutputShardingSpecs(l.outputSpecs(ctx, inputs[0].Graph(), len(outputs))...)
		return outputs
	})
	if err != nil {
		return err
	}
	exec.AutoSharding(l.mesh)
	batchSpecs := make([]*distributed.ShardingSpec, len(t.InputShapes()))
	for i := range batchSpecs {
		batchSpecs[i] = l.batch
	}
	exec.WithInputShardingSpecs(batchSpecs...)
	e.exec, e.layout = exec.WithName(StepName), l
	return nil
}

func (e *spmdExecutor) Run(batch []*tensors.Tensor) ([]*tensors.Tensor, *graph.Graph, error) {
	if e.exec == nil {
		if err := e.prepare(); err != nil {
			return nil, nil, err
		}
	}
	sharded, err := e.layout.distributedArgs(batch)
	if err != nil {
		return nil, nil, err
	}
	return e.exec.ExecWithGraph(sharded...)
}

func (e *spmdExecutor) Stats() Stats { return nil }

func (e *spmdExecutor) Close() {
	if e.exec != nil {
		e.exec.Finalize()
		e.exec = nil
	}
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

// sharded reports whether the layout splits v, a variable of ctx, across the devices rather than
// copying it: trainable weights under ShardParams, the optimizer's state under either sharding
// (graph.VariableRole). Frozen weights, counters and the random state are copied whole.
func (l *layout) sharded(ctx *context.Context, v *context.Variable) bool {
	switch role := analysis.VariableRole(ctx, v); l.shard {
	case ShardParams:
		return role == analysis.RoleTrainable || role == analysis.RoleOptimizerState
	case ShardOptimizer:
		return role == analysis.RoleOptimizerState
	}
	return false
}

// spec returns v's sharding: split along its first axis that divides evenly across the devices
// when the layout shards it, replicated otherwise (and for tensors no axis of which divides).
func (l *layout) spec(ctx *context.Context, v *context.Variable) *distributed.ShardingSpec {
	if !l.sharded(ctx, v) {
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
		if err := v.SetShardingSpec(l.spec(ctx, v)); err != nil {
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
	p, err := analysis.ContextProgram(backend, ctx, "create_variables", inputs, fn)
	if err != nil {
		return err
	}
	p.Graph.Finalize()
	return nil
}

// outputSpecs are the shardings of the step's outputs as GoMLX's context.Exec orders them: the new
// values of the variables the step changed, in context order, each as its variable is sharded,
// then the step's own outputs (loss and metrics), replicated. XLA is told them explicitly, since
// the shards it returns become the variables' next values.
func (l *layout) outputSpecs(ctx *context.Context, g *graph.Graph, numOutputs int) []*distributed.ShardingSpec {
	var specs []*distributed.ShardingSpec
	ctx.EnumerateVariables(func(v *context.Variable) {
		if v.ChangedInGraph(g) {
			specs = append(specs, l.spec(ctx, v))
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
