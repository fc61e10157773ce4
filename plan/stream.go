package plan

import (
	"fmt"
	"slices"
	"strings"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/gomlx/gomlx/pkg/ml/context"

	"github.com/onegpu/onegpu/analysis"
	"github.com/onegpu/onegpu/exact"
	"github.com/onegpu/onegpu/optim"
	"github.com/onegpu/onegpu/train"
)

// The streamed run's estimate (--offload params, issue 27): the device holds one stage's weights
// twice (the one computing, the next arriving) as the executor holds them (float32 masters in
// float32: a bfloat16 copy that crossed the bus is widened on arrival, one weight at a time), that
// stage's float32 gradient accumulator, the largest stage program's working memory and the inputs
// every block keeps for the backward pass; the host holds the float32 master weights, the
// optimizer's state and the float32 gradients. Each part comes from the stage programs the
// streamed executor runs, built by its own builder (train.Trainer.StreamedPrograms, never run) and
// analyzed like a whole step (analysis.Analyze): the embedding, one block (every block runs the
// same programs) and the head. The kept inputs stay on the device: the executor keeps them there
// (a plan answers only what the executor can run). The weights a stage's programs read only
// rounded to the compute dtype cross the bus in it (train.StreamedStage.Narrow); the step's time
// is the executor's schedule (stepSchedule): the host updates each stage while the device runs
// the next stage's backward pass.

// StageEstimate is one kind of stage of a streamed step.
type StageEstimate struct {
	// Name is "embed", "block" or "head"; Count how many of it the model has.
	Name  string `json:"name"`
	Count int    `json:"count"`
	// Params are its trainable parameters, SharedParams those of them an earlier stage has too
	// (the head's tied embedding); StateBytes the optimizer state of its own parameters (built by
	// the run's optimizer on them).
	Params       int64 `json:"params"`
	SharedParams int64 `json:"shared_params,omitempty"`
	StateBytes   int64 `json:"state_bytes"`
	// FrozenBytes are its frozen weights as stored (a LoRA run's base: floats in the base's dtype,
	// or NF4 codes and scales), which cross to the device with it and take no gradient or state;
	// SharedFrozenBytes those an earlier stage has too (a tied embedding).
	FrozenBytes       int64 `json:"frozen_bytes,omitempty"`
	SharedFrozenBytes int64 `json:"shared_frozen_bytes,omitempty"`
	// WeightBytes are its weights (trainable and frozen) as the device holds them: as stored,
	// float32 masters in float32 (the streamed executor widens a bfloat16 copy on arrival);
	// BusBytes those of one upload, the weights its programs read only rounded to the compute
	// dtype in it (train.StreamedStage.Narrow), the rest as stored; WidenBytes the largest such
	// copy, which the device holds beside the float32 values until it is widened.
	WeightBytes int64 `json:"weight_bytes"`
	BusBytes    int64 `json:"bus_bytes"`
	WidenBytes  int64 `json:"widen_bytes,omitempty"`
	// WorkBytes is the most its programs allocate above their arguments (analysis.Analyze's
	// PeakTempBytes: activations, recomputation, the float32 gradients they return), per
	// micro-batch; FLOPs its forward and backward FLOPs per micro-batch (the backward recomputes
	// the forward).
	WorkBytes int64 `json:"work_bytes"`
	FLOPs     int64 `json:"flops"`
	// BackwardFLOPs are those of FLOPs its backward program computes (the head's one program: all).
	BackwardFLOPs int64 `json:"backward_flops"`
}

// Streamed is the estimate of a streamed step: device and host memory apart, the traffic between
// them and the step time each part sets.
type Streamed struct {
	Stages []StageEstimate `json:"stages"`
	Params int64           `json:"params"`
	// The device: the largest stage's weights (StageEstimate.WeightBytes) twice (double
	// buffering) and the largest bfloat16 copy on its way to being widened (WidenBytes), its
	// float32 gradient accumulator, the largest stage program's working memory, and the block
	// inputs kept for the backward pass (every block's and the head's, for the whole batch, in the
	// compute dtype).
	StageWeightBytes    int64 `json:"stage_weight_bytes"`
	WidenBytes          int64 `json:"widen_bytes,omitempty"`
	DeviceWeightBytes   int64 `json:"device_weight_bytes"`
	DeviceGradientBytes int64 `json:"device_gradient_bytes"`
	WorkBytes           int64 `json:"work_bytes"`
	KeptInputBytes      int64 `json:"kept_input_bytes"`
	DeviceBytes         int64 `json:"device_bytes"`
	// The host: float32 master weights, the optimizer's state, float32 gradients (counted for
	// all of a step's: a clip keeps them until the step's norm is known), and under a loss scale
	// or a clip the undo records of the speculated update (hostengine.Stage.Save: a copy of the
	// masters and the state; none with Config.SerialHostUpdate).
	MasterBytes       int64 `json:"master_bytes"`
	StateBytes        int64 `json:"state_bytes"`
	HostGradientBytes int64 `json:"host_gradient_bytes"`
	UndoBytes         int64 `json:"undo_bytes,omitempty"`
	// FrozenBytes is a LoRA run's frozen base in host memory, as stored (no master copy, state or
	// gradient: only the adapters train).
	FrozenBytes int64 `json:"frozen_bytes,omitempty"`
	HostBytes   int64 `json:"host_bytes"`
	// Traffic per step: weights to the device (each stage's forward and backward, the head's once;
	// StageEstimate.BusBytes) and float32 gradients back.
	BytesToDevice int64 `json:"bytes_to_device"`
	BytesToHost   int64 `json:"bytes_to_host"`
	StepTime
}

// StepTime is a streamed step's time: each part's total (the device's compute, the transfers of
// the busier direction, the host's update), and the step as the executor schedules them
// (stepSchedule: the parts overlap stage by stage), and as it would be with the host update after
// the backward pass (Config.SerialHostUpdate); Bound names the largest part.
type StepTime struct {
	FLOPs            int64   `json:"flops"`
	ComputeSeconds   float64 `json:"compute_seconds"`
	TransferSeconds  float64 `json:"transfer_seconds"`
	HostSeconds      float64 `json:"host_update_seconds"`
	Seconds          float64 `json:"step_seconds"`
	SerialSeconds    float64 `json:"serial_step_seconds"`
	Bound            string  `json:"bound"`
	BusBytesPerSec   float64 `json:"bus_bytes_per_second"`
	HostParamsPerSec float64 `json:"host_params_per_second"`
}

// Bounds of StepTime.Bound.
const (
	BoundCompute    = "device compute"
	BoundBus        = "host-device transfers"
	BoundHostUpdate = "host update"
)

// PCIe5Bandwidth is a PCIe 5.0 x16 link's practical rate per direction, in bytes per second
// (64 GB/s raw): the default host-device bandwidth of a streamed plan.
const PCIe5Bandwidth = 55e9

// DefaultHostRates are host update rates in parameters per second by optimizer name, measured
// with `onegpu bench --grid host` on the XLA CPU client of a 2-core machine (CI's): the default
// of a streamed plan. A host with more cores and memory channels updates faster: measure yours and
// give it (StreamOptions.HostRate, plan --host-rate).
var DefaultHostRates = map[string]float64{"adam": 4.4e8, "adamw": 4.4e8, "adam8bit": 5.1e7, "adafactor": 1.15e8}

// StreamOptions are what a streamed step's time depends on besides the model.
type StreamOptions struct {
	// Throughput is the device's (FLOPs at the compute dtype's rate).
	Throughput Throughput
	// Bandwidth is the host-device rate per direction in bytes per second; 0 is PCIe5Bandwidth.
	Bandwidth float64
	// HostRate is the host update's rate in parameters per second; 0 is HostRates' figure for the
	// run's optimizer, else DefaultHostRates'.
	HostRate float64
	// HostRates are measured rates by optimizer name (as optim.ByName spells it), for the
	// optimizers a plan compares (plan --largest); nil: DefaultHostRates.
	HostRates map[string]float64
}

// EstimateStreamed estimates config's step run streamed (train.OffloadParams, whatever
// config.Offload says): it builds, without running, the stage programs the streamed executor runs
// (train.Trainer.StreamedPrograms) for config.Model (a staged model: GPT, Llama) at config's
// micro-batch, policy, remat, attention and cross-entropy, and the optimizer's update of each
// stage's variables for its state. Nothing is allocated on backend.
func EstimateStreamed(backend backends.Backend, config train.Config, o StreamOptions) (Streamed, error) {
	if err := o.Throughput.Validate(); err != nil {
		return Streamed{}, err
	}
	if o.Bandwidth == 0 {
		o.Bandwidth = PCIe5Bandwidth
	}
	if !(o.Bandwidth > 0) || o.Bandwidth > 1e15 {
		return Streamed{}, fmt.Errorf("a host-device bandwidth of %g bytes/s: give a positive rate up to 1 PB/s", o.Bandwidth)
	}
	opt := optimizerOf(config)
	if o.HostRate == 0 {
		name := strings.SplitN(opt.String(), "(", 2)[0]
		rate, ok := o.HostRates[name]
		if !ok {
			rate, ok = DefaultHostRates[name]
		}
		if !ok {
			return Streamed{}, fmt.Errorf("no measured host update rate for optimizer %s: measure it (onegpu bench --grid host) and give it (--host-rate)", opt)
		}
		o.HostRate = rate
	}
	if !(o.HostRate > 0) || o.HostRate > 1e15 {
		return Streamed{}, fmt.Errorf("a host update rate of %g parameters/s: give a positive rate", o.HostRate)
	}
	config.Offload, config.DeviceBudget = train.OffloadParams, 0
	tr, err := train.New(backend, config)
	if err != nil {
		return Streamed{}, err
	}
	programs, err := tr.StreamedPrograms()
	if err != nil {
		return Streamed{}, err
	}
	defer programs.Finalize()
	stages, err := estimateStages(backend, config, programs)
	if err != nil {
		return Streamed{}, err
	}
	chain, err := tr.Chain()
	if err != nil {
		return Streamed{}, err
	}
	speculates := !config.SerialHostUpdate && (chain.ChecksFinite() || chain.ClipNorm() > 0) // as startHostRun decides
	return combine(config, stages, programs.Input, speculates, o), nil
}

// combine adds the stages up; speculates says whether the host keeps undo records.
func combine(config train.Config, stages []StageEstimate, x shapes.Shape, speculates bool, o StreamOptions) Streamed {
	compute := computeDType(config)
	k := int64(max(config.MicroBatches, 1))
	s := Streamed{Stages: stages}
	var largestParams int64
	for _, st := range stages {
		n := int64(st.Count)
		s.Params += n * (st.Params - st.SharedParams)
		s.StateBytes += n * st.StateBytes
		s.FrozenBytes += n * (st.FrozenBytes - st.SharedFrozenBytes)
		largestParams = max(largestParams, st.Params)
		s.WorkBytes = max(s.WorkBytes, st.WorkBytes)
		s.FLOPs += n * k * st.FLOPs
		s.BytesToDevice += n * int64(uploads(st)) * st.BusBytes
		s.StageWeightBytes = max(s.StageWeightBytes, st.WeightBytes)
		s.WidenBytes = max(s.WidenBytes, st.WidenBytes)
	}
	s.DeviceWeightBytes = 2*s.StageWeightBytes + s.WidenBytes
	s.DeviceGradientBytes = 4 * largestParams
	// Every block's input and the head's, for the whole batch: x is one micro-batch's.
	s.KeptInputBytes = int64(stages[1].Count+1) * k * int64(x.Memory())
	s.DeviceBytes = s.DeviceWeightBytes + s.DeviceGradientBytes + s.WorkBytes + s.KeptInputBytes
	s.MasterBytes = 4 * s.Params
	s.HostGradientBytes = 4 * s.Params
	if speculates {
		s.UndoBytes = s.MasterBytes + s.StateBytes
	}
	s.BytesToHost = 4 * s.Params
	s.HostBytes = s.MasterBytes + s.StateBytes + s.HostGradientBytes + s.UndoBytes + s.FrozenBytes
	tflops := o.Throughput.Float32
	if compute == dtypes.BFloat16 || compute == dtypes.Float16 {
		tflops = o.Throughput.BFloat16
	}
	t := StepTime{FLOPs: s.FLOPs, BusBytesPerSec: o.Bandwidth, HostParamsPerSec: o.HostRate,
		ComputeSeconds:  float64(s.FLOPs) / (tflops * 1e12),
		TransferSeconds: float64(max(s.BytesToDevice, s.BytesToHost)) / o.Bandwidth, // each direction has its own lanes
		HostSeconds:     float64(s.Params) / o.HostRate}
	instances := scheduleOf(stages, float64(k)/(tflops*1e12), o)
	t.Seconds, t.SerialSeconds = stepSchedule(instances, config.SerialHostUpdate), stepSchedule(instances, true)
	switch longest := max(t.ComputeSeconds, t.TransferSeconds, t.HostSeconds); longest {
	case t.HostSeconds:
		t.Bound = BoundHostUpdate
	case t.TransferSeconds:
		t.Bound = BoundBus
	default:
		t.Bound = BoundCompute
	}
	s.StepTime = t
	return s
}

// computeDType is the run's compute dtype (float32 when the policy says none).
func computeDType(c train.Config) dtypes.DType {
	if c.Policy.Compute == dtypes.InvalidDType {
		return dtypes.Float32
	}
	return c.Policy.Compute
}

// optimizerOf is the run's optimizer: Config.Optimizer, or the tutorial's Adam.
func optimizerOf(c train.Config) optim.Optimizer {
	if c.Optimizer == nil {
		return optim.Adam().Done()
	}
	return c.Optimizer
}

// estimateStages returns the embedding's, a block's and the head's estimates from the streamed
// programs. The three are built in one context, so that a weight the embedding and the head share
// (tied embeddings) is one variable: counted in each stage's weights (each uploads it), once in
// the model's parameters and state.
func estimateStages(backend backends.Backend, config train.Config, programs *train.StreamedPrograms) ([]StageEstimate, error) {
	var estimates []StageEstimate
	var earlier, earlierFrozen []*context.Variable // the trainable and frozen variables of the stages before
	for _, st := range programs.Stages {
		e := StageEstimate{Name: st.Name, Count: st.Count, Params: countParams(st.Trainable)}
		for _, v := range st.Frozen {
			e.FrozenBytes += int64(v.Shape().Memory())
			if slices.Contains(earlierFrozen, v) {
				e.SharedFrozenBytes += int64(v.Shape().Memory())
			}
		}
		for _, v := range append(slices.Clone(st.Trainable), st.Frozen...) {
			held := int64(v.Shape().Memory())
			e.WeightBytes += held
			if st.Narrow[v] {
				sent := held / int64(dtypes.Float32.Size()) * int64(dtypes.BFloat16.Size()) // a float32 master's bfloat16 copy
				e.BusBytes += sent
				e.WidenBytes = max(e.WidenBytes, sent)
			} else {
				e.BusBytes += held
			}
		}
		earlierFrozen = append(earlierFrozen, st.Frozen...)
		for i, p := range st.Programs {
			m := analysis.Analyze(p)
			e.WorkBytes = max(e.WorkBytes, m.PeakTempBytes)
			e.FLOPs += m.FLOPs // the head's one program is its forward and backward
			if i == len(st.Programs)-1 && (st.Name == "head" || len(st.Programs) > 1) {
				e.BackwardFLOPs = m.FLOPs
			}
		}
		var own []*context.Variable
		for _, v := range st.Trainable {
			if !slices.Contains(earlier, v) {
				own = append(own, v)
			}
		}
		e.SharedParams = e.Params - countParams(own)
		var err error
		if e.StateBytes, err = stateBytes(backend, config, programs.Ctx, own); err != nil {
			return nil, err
		}
		earlier = append(earlier, own...)
		estimates = append(estimates, e)
	}
	return estimates, nil
}

// countParams is the elements of vars.
func countParams(vars []*context.Variable) int64 {
	var n int64
	for _, v := range vars {
		n += int64(v.Shape().Size())
	}
	return n
}

// stateBytes builds the run's optimizer's update of vars in ctx and returns the bytes of the
// variables it creates (its state: moments, codes and scales, counters).
func stateBytes(backend backends.Backend, config train.Config, ctx *context.Context, vars []*context.Variable) (int64, error) {
	if len(vars) == 0 {
		return 0, nil
	}
	before := map[*context.Variable]bool{}
	for v := range ctx.IterVariables() {
		before[v] = true
	}
	opt := optimizerOf(config)
	p, err := analysis.ContextProgram(backend, ctx, "state", []shapes.Shape{shapes.Make(dtypes.Float32)}, func(ctx *context.Context, in []*graph.Node) []*graph.Node {
		g := in[0].Graph()
		grads := make([]*graph.Node, len(vars))
		for i, v := range vars {
			v.ValueGraph(g)
			grads[i] = graph.BroadcastToDims(graph.ConvertDType(in[0], exact.WideDType(v.DType())), v.Shape().Dimensions...)
		}
		opt.UpdateGraphWithGradients(ctx, grads, dtypes.Float32)
		return []*graph.Node{graph.MulScalar(in[0], 1)}
	})
	if err != nil {
		return 0, err
	}
	p.Graph.Finalize()
	var bytes int64
	for v := range ctx.IterVariables() {
		if !before[v] {
			bytes += int64(v.Shape().Memory())
		}
	}
	return bytes, nil
}
