package train

import (
	"fmt"
	"io"
	"time"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/gomlx/gomlx/pkg/ml/context"

	"github.com/onegpu/onegpu/accum"
	"github.com/onegpu/onegpu/analysis"
	"github.com/onegpu/onegpu/optim/hostengine"
	"github.com/onegpu/onegpu/platform"
)

// The optimizer offload (ZeRO-Offload's split, Ren et al. 2021): with Config.Offload OffloadOptimizer a
// step runs on two backends with one context. The device program (on the trainer's backend)
// computes the loss, the metrics and the float32 gradients (Chain.Gradients); the host update
// (hostUpdate: the run's chain through optim/hostengine, on XLA's CPU client when there is a CPU
// plugin, else the embedded backend, the optimizer's flat loop where it has one) applies the
// schedule, the loss-scale check, clipping and the optimizer, and the moving-average loss, so the
// optimizer's moments and counters are created, kept and updated in host memory only. Per step the
// updated parameters go to the device and the gradients come back; the loss scale (a scalar) is
// the only other state both use.
//
// GoMLX v0.26.0 binds a tensor to one backend: a variable both sides use is brought back to
// local memory (Tensor.ToLocal) before the other side runs, and sent on with
// Tensor.MaterializeOnDevice.

func init() {
	RegisterMode(OffloadOptimizer.String(), Mode{New: func(t *Trainer) Executor { return &offloadExecutor{t: t} }, Check: checkOffloadOptimizer,
		Stats: func() Stats { return &OffloadStats{} }})
}

// checkOffloadOptimizer refuses what the optimizer offload cannot do: parameters that are not
// float32 or float64 (the device returns float32 gradients in their buffers), several devices.
func checkOffloadOptimizer(c Config) error {
	if err := noBudget(c); err != nil {
		return err
	}
	if p := c.Policy.Param; p != dtypes.InvalidDType && p != dtypes.Float32 && p != dtypes.Float64 {
		return fmt.Errorf("Config.Offload optimizer with %s parameters: the device returns float32 gradients in the parameters' buffers; "+
			"keep the parameters in float32 (Config.Policy params=float32,...)", p)
	}
	if c.Devices.Distributed() {
		return fmt.Errorf("Config.Offload optimizer with Config.Devices.Count %d: the offloaded update feeds one device; use Config.Devices.Count 1, "+
			"or keep the state on the devices and split it with Config.Devices.Shard optimizer", c.Devices.Count)
	}
	return nil
}

// OffloadStats are the traffic of a step with the optimizer offloaded, and its times.
type OffloadStats struct {
	// BytesToDevice are the variables sent to the device (the updated parameters, and the loss
	// scale when there is one); BytesToHost the gradients brought back (and any shared variable
	// the device held without a host copy). The step's scalar outputs are not counted.
	BytesToDevice int64 `json:"bytes_to_device"`
	BytesToHost   int64 `json:"bytes_to_host"`
	// TransferSeconds is the time spent moving them; HostSeconds the host update's time.
	TransferSeconds float64 `json:"transfer_seconds"`
	HostSeconds     float64 `json:"host_seconds"`
}

// Mean is the later steps' traffic (the last one's bytes) and mean times; o when there is none.
func (o *OffloadStats) Mean(later []Stats) Stats {
	if len(later) == 0 {
		return o
	}
	return meanOfLater(later, func(s *OffloadStats) []*float64 { return []*float64{&s.TransferSeconds, &s.HostSeconds} })
}

// WriteSummary writes the bytes each way per step and the times of moving them and of the host's
// update.
func (o *OffloadStats) WriteSummary(w io.Writer) {
	fmt.Fprintf(w, "%-22s %s to the device, %s back per step; %.1f ms moving them, %.1f ms host update\n", "optimizer offload",
		analysis.FormatBytes(o.BytesToDevice), analysis.FormatBytes(o.BytesToHost), 1e3*o.TransferSeconds, 1e3*o.HostSeconds)
}

// deviceGradientsFn is the device's part of an offloaded step: the loss, metrics and count, with
// each parameter's float32 gradient written over the parameter (so that XLA reuses the
// parameter's buffer for it: the device holds the parameters or their gradients, never both, and
// no optimizer state).
func (t *Trainer) deviceGradientsFn() accum.StepFn {
	chain := t.mustChain()
	return func(ctx *context.Context, inputs []*graph.Node) []*graph.Node {
		t.Config.Settings().Apply(ctx, inputs[0].Graph())
		r := chain.Gradients(ctx, inputs, t.lossFn())
		t.checkRematKinds(inputs[0].Graph())
		for i, v := range r.Variables {
			v.SetValueGraph(graph.ConvertDType(r.Gradients[i], v.DType()))
		}
		return append(r.Outputs(), r.Count)
	}
}

// HostUpdateProgram builds, for analysis, the offloaded update's graph on backend in ctx, after a
// program of the device's step was built in ctx: the host engine's update of every trainable
// variable (hostengine.Engine.UpdateProgram), whose state parameters are what host memory holds
// besides the parameters and gradients.
func (t *Trainer) HostUpdateProgram(backend backends.Backend, ctx *context.Context) (*analysis.Program, error) {
	var trainable []*context.Variable
	for v := range ctx.IterVariables() {
		if analysis.VariableRole(ctx, v) == analysis.RoleTrainable {
			trainable = append(trainable, v)
		}
	}
	if len(trainable) == 0 {
		return nil, fmt.Errorf("the host update: build the device's step (DeviceStepFn) in the context first")
	}
	chain, err := t.Chain()
	if err != nil {
		return nil, err
	}
	engine, err := hostengine.New(hostengine.Config{Backend: backend, Ctx: ctx, Chain: chain, Schedule: t.Config.Schedule, NoParams: true})
	if err != nil {
		return nil, err
	}
	defer engine.Close()
	return engine.UpdateProgram("all", trainable)
}

// offloadExecutor runs an offloaded step: deviceGradientsFn on the trainer's backend, the host
// update on a host backend of its own.
type offloadExecutor struct {
	t          *Trainer
	host       backends.Backend
	deviceExec *context.Exec
	update     *hostUpdate
	// deviceVars and hostVars are the variables each side uses; trainable the parameters.
	deviceVars, hostVars map[*context.Variable]bool
	trainable            []*context.Variable
	grads                []*tensors.Tensor // the device's gradients of the last step
	last                 *OffloadStats
}

func (o *offloadExecutor) DeviceStep() accum.StepFn { return o.t.deviceGradientsFn() }

func (o *offloadExecutor) Stats() Stats {
	if o.last == nil {
		return nil
	}
	return o.last
}

// start prepares the two programs: it builds each once, without compiling, to create and
// initialize its variables on its own backend (the parameters on the device, the optimizer state
// on the host) and to learn which variables each uses. (GoMLX's Exec.PreCompile would donate the
// buffers of the variables a program changes without running it.)
func (o *offloadExecutor) start() error {
	t := o.t
	host, _, err := hostengine.NewBackend()
	if err != nil {
		return fmt.Errorf("Config.Offload optimizer: the host backend: %w", err)
	}
	o.host = host
	if err := o.prepare(t); err != nil {
		o.Close()
		return err
	}
	o.deviceExec, err = context.NewExec(t.Backend, t.Ctx, platform.AliasUpdatedState(t.deviceGradientsFn()))
	if err != nil {
		o.Close()
		return err
	}
	o.deviceExec = o.deviceExec.WithName(StepName)
	return nil
}

func (o *offloadExecutor) prepare(t *Trainer) error {
	// The programs find the variables these builds create, as after a checkpoint.
	t.Ctx = t.Ctx.Checked(false)
	device, err := analysis.ContextProgram(t.Backend, t.Ctx, StepName, t.StepShapes(), t.deviceGradientsFn())
	if err != nil {
		return err
	}
	o.deviceVars = variablesUsedBy(t.Ctx, device.Graph)
	o.trainable = accum.TrainableVariables(t.Ctx, device.Graph)
	device.Graph.Finalize()
	if err := t.Ctx.InitializeVariables(t.Backend, nil); err != nil {
		return fmt.Errorf("initializing the variables on the device: %w", err)
	}
	if o.update, err = newHostUpdate(t, o.host, map[string][]*context.Variable{"all": o.trainable}, []string{"all"}, nil); err != nil {
		return fmt.Errorf("the host update: %w", err)
	}
	o.hostVars, err = o.update.variables()
	return err
}

// variablesUsedBy lists the variables g uses.
func variablesUsedBy(ctx *context.Context, g *graph.Graph) map[*context.Variable]bool {
	used := map[*context.Variable]bool{}
	for v := range ctx.IterVariables() {
		if v.InUseByGraph(g) {
			used[v] = true
		}
	}
	return used
}

// unbind brings the values of the non-trainable variables in vars that another backend than b
// holds back to local memory (GoMLX ties a tensor to one backend; b's executor places them) and
// returns the bytes that crossed: those of which the other backend held the only copy.
func unbind(ctx *context.Context, vars map[*context.Variable]bool, b backends.Backend) (int64, error) {
	var moved int64
	for v := range ctx.IterVariables() {
		if v.Trainable || !vars[v] || !v.HasValue() {
			continue
		}
		value, err := v.Value()
		if err != nil {
			return moved, err
		}
		if !value.IsOnAnyDevice() {
			continue
		}
		if on, err := value.Backend(); err != nil || on == b {
			continue
		}
		if !value.HasLocal() && !value.IsShared() {
			moved += int64(value.Memory())
		}
		if err := value.ToLocal(); err != nil {
			return moved, fmt.Errorf("moving %s off its backend: %w", v.ScopeAndName(), err)
		}
	}
	return moved, nil
}

// run runs the device program on batch, brings the gradients to the host and runs the update
// there. It returns StepFn's outputs (loss, metrics, count, finite flag, mean loss) and the
// device's graph.
func (o *offloadExecutor) Run(batch []*tensors.Tensor) ([]*tensors.Tensor, *graph.Graph, error) {
	if o.deviceExec == nil {
		if err := o.start(); err != nil {
			return nil, nil, err
		}
	}
	ctx, device := o.t.Ctx, o.t.Backend
	var stats OffloadStats
	// The host keeps the parameters (its master copy); the device gets a copy, which the step
	// consumes.
	start := time.Now()
	masters := make([]*tensors.Tensor, len(o.trainable))
	for i, v := range o.trainable {
		master, err := v.Value()
		if err != nil {
			return nil, nil, err
		}
		if on, err := master.Backend(); err == nil && on == device {
			if err := master.ToLocal(); err != nil { // freshly initialized on the device
				return nil, nil, err
			}
		}
		clone, err := master.OnDeviceClone(device, 0)
		if err != nil {
			return nil, nil, fmt.Errorf("sending %s to the device: %w", v.ScopeAndName(), err)
		}
		stats.BytesToDevice += int64(clone.Memory())
		masters[i] = master
		if err := v.SetValuePreservingOld(clone); err != nil {
			return nil, nil, err
		}
	}
	n, err := unbind(ctx, o.deviceVars, device)
	if err != nil {
		return nil, nil, err
	}
	stats.BytesToDevice += n
	stats.TransferSeconds = time.Since(start).Seconds()

	reported, g, err := o.deviceExec.ExecWithGraph(args(batch)...)
	restoreErr := o.restore(masters)
	if err != nil {
		return nil, nil, err
	}
	if restoreErr != nil {
		return nil, nil, restoreErr
	}
	for _, r := range reported {
		// Reading the step's results waits for the device to finish, so what follows times the
		// transfer alone.
		if err := r.ToLocal(); err != nil {
			return nil, nil, err
		}
	}
	start = time.Now()
	grads := o.grads
	byVariable := make(map[*context.Variable]*tensors.Tensor, len(grads))
	for i, grad := range grads {
		if err := grad.ToLocal(); err != nil {
			return nil, nil, fmt.Errorf("moving the gradient of %s to the host: %w", o.trainable[i].ScopeAndName(), err)
		}
		stats.BytesToHost += int64(grad.Memory())
		byVariable[o.trainable[i]] = grad
	}
	if n, err = unbind(ctx, o.hostVars, o.host); err != nil {
		return nil, nil, err
	}
	stats.BytesToHost += n
	stats.TransferSeconds += time.Since(start).Seconds()

	start = time.Now()
	hostOuts, err := o.update.run(byVariable, scalar32(reported[0]), 1) // the device's gradients are means
	if err != nil {
		return nil, nil, fmt.Errorf("the host's optimizer update: %w", err)
	}
	stats.HostSeconds = time.Since(start).Seconds()
	for _, grad := range grads {
		grad.FinalizeAll()
	}
	o.last = &stats
	return append(reported, hostOuts...), g, nil
}

// restore takes the gradients the device step left in the parameters' variables (o.grads) and
// gives the variables their master copies back.
func (o *offloadExecutor) restore(masters []*tensors.Tensor) error {
	o.grads = make([]*tensors.Tensor, len(o.trainable))
	var firstErr error
	for i, v := range o.trainable {
		if grad, err := v.Value(); err == nil {
			o.grads[i] = grad
		} else if firstErr == nil {
			firstErr = err
		}
		if err := v.SetValuePreservingOld(masters[i]); err != nil && firstErr == nil {
			firstErr = err
		}
	}
	return firstErr
}

func (o *offloadExecutor) Close() {
	if o.deviceExec != nil {
		o.deviceExec.Finalize()
	}
	if o.update != nil {
		o.update.close()
	}
	if o.host != nil {
		o.host.Finalize()
	}
	o.deviceExec, o.update, o.host = nil, nil, nil
}

// scalar32 is a float scalar tensor's value as float32.
func scalar32(t *tensors.Tensor) float32 { return float32(scalar(t)) }
