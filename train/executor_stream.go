package train

import (
	"fmt"
	"io"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/gomlx/gomlx/pkg/ml/context"

	"github.com/onegpu/onegpu/accum"
	"github.com/onegpu/onegpu/analysis"
	"github.com/onegpu/onegpu/optim/hostengine"
)

// The streamed step (Config.Offload OffloadParams; ZeRO-Infinity's and MegaTrain's layout on one
// device): the trainer's context holds the float32 master weights, the optimizer's state, the
// step counter, the loss scale and the moving-average loss in host memory, on the host engine (an
// XLA CPU client of $ONEGPU_HOST_PJRT_PLUGIN, or of $ONEGPU_PJRT_PLUGIN when that is a CPU plugin,
// else the embedded backend: hostengine.NewBackend).
// A step runs the model a stage at a time (train.Staged: the embedding, the blocks, the head):
//
//   - forward: each stage's weights go to the device, every micro-batch passes through the stage
//     (weights cross once per step and direction, not per micro-batch), the stage's inputs stay on
//     the device, the weights are freed;
//   - backward, in reverse: the head computes each micro-batch's loss and its cotangent; each
//     stage's weights go to the device again, the stage is recomputed and differentiated per
//     micro-batch, its float32 gradients summed over the micro-batches on the device and brought
//     to the host;
//   - a LoRA run's frozen base (Config.LoRA: float in BaseDType, or quantized for QLoRA, NF4's
//     0.52 bytes a parameter) stays in host memory as it is and crosses the bus with its stage, once
//     per step and direction; it takes no gradient and no host update: only the adapters do. A
//     stage without trainable variables (the embedding, under LoRA) is not run backward;
//   - the host update (hostUpdate, the optimizer offload's) applies the run's optimizer chain
//     (loss-scale check and atomic skip, clipping, Adam, 8-bit Adam, Adafactor) to all parameters
//     at once, after the last gradients arrived: under a loss scale a non-finite gradient in any
//     block must leave every parameter unchanged, and the global-norm clipping needs every
//     gradient, so the update waits for the whole backward pass.
//
// One program per kind of stage serves every instance of it: all blocks share one forward and one
// backward program, so compile time does not grow with depth. The math is the whole step's (the
// same loss normalization, loss scale and float32 accumulation over micro-batches as
// accum.ScaledGradients); dropout draws the same masks when there is one micro-batch (block-major
// order is then the whole step's order), other masks of the same distribution otherwise.
// Checkpoints hold the same variables as a whole step's, so either resumes the other.

func init() {
	RegisterMode(OffloadParams.String(), Mode{New: func(t *Trainer) Executor { return &streamExecutor{t: t} }, Check: Config.checkStreamed,
		Stats: func() Stats { return &StreamStats{} }, Staged: true})
}

// StreamStats are the traffic of a streamed step and the time of each part.
type StreamStats struct {
	// BytesToDevice are the stages' weights (each stage's forward and backward) and the batch sent
	// to the device; BytesToHost the float32 gradients brought back.
	BytesToDevice int64 `json:"bytes_to_device"`
	BytesToHost   int64 `json:"bytes_to_host"`
	// TransferSeconds is the time the step waited for transfers (uploads and gradients);
	// UploadSeconds the uploads' own time, the rest of it hidden behind computation (the next
	// stage's weights are sent while the current one computes); DeviceSeconds the time in the
	// stages' programs; HostSeconds the host update's.
	TransferSeconds float64 `json:"transfer_seconds"`
	HostSeconds     float64 `json:"host_seconds"`
	UploadSeconds   float64 `json:"upload_seconds"`
	DeviceSeconds   float64 `json:"device_seconds"`
	// DevicePeakBytes is the largest device footprint of the step: at a program's run, its
	// memory by XLA's account (arguments, outputs, temporaries, code; on the embedded backend,
	// which reports none, its arguments and outputs) plus the other buffers the step kept on the
	// device then (stage inputs, cotangents, gradient sums). Config.DeviceBudget bounds it.
	DevicePeakBytes int64 `json:"device_peak_bytes"`
}

// Mean is the later steps' traffic (the last one's bytes) and mean times, and the largest
// footprint of all; s when there is no later step.
func (s *StreamStats) Mean(later []Stats) Stats {
	if len(later) == 0 {
		return s
	}
	m := meanOfLater(later, func(s *StreamStats) []*float64 {
		return []*float64{&s.TransferSeconds, &s.HostSeconds, &s.UploadSeconds, &s.DeviceSeconds}
	})
	m.DevicePeakBytes = s.DevicePeakBytes
	for _, l := range later {
		m.DevicePeakBytes = max(m.DevicePeakBytes, l.(*StreamStats).DevicePeakBytes)
	}
	return m
}

// Bound names what bounds a streamed step, the largest of its parts: "the bus" (the weights'
// uploads, hidden or not, and the time waiting for transfers), "the device" (the stages'
// programs) or "the host update".
func (s *StreamStats) Bound() string {
	bus := max(s.TransferSeconds, s.UploadSeconds)
	switch {
	case bus >= s.DeviceSeconds && bus >= s.HostSeconds:
		return "the bus"
	case s.DeviceSeconds >= s.HostSeconds:
		return "the device"
	}
	return "the host update"
}

// WriteSummary writes the traffic, the time of each part and the bound, and the largest device
// footprint.
func (s *StreamStats) WriteSummary(w io.Writer) {
	fmt.Fprintf(w, "%-22s %s to the device, %s back per step; %.1f ms waiting for transfers (uploads %.1f ms, overlapped), %.1f ms on the device, %.1f ms host update: bound by %s\n",
		"streamed (params)", analysis.FormatBytes(s.BytesToDevice), analysis.FormatBytes(s.BytesToHost), 1e3*s.TransferSeconds, 1e3*s.UploadSeconds,
		1e3*s.DeviceSeconds, 1e3*s.HostSeconds, s.Bound())
	fmt.Fprintf(w, "%-22s %s\n", "largest device use", analysis.FormatBytes(s.DevicePeakBytes))
}

// streamExecutor runs a streamed step.
type streamExecutor struct {
	t *Trainer
	// stageLayout holds the stage instances' variables (and the trainable ones, the host update's
	// order); nil until start.
	*stageLayout
	host backends.Backend
	// The stages: their templates and programs.
	embed, block, head *streamStage
	update             *hostUpdate
	last               *StreamStats
	// compiled is each program's device memory by XLA's account, once known.
	compiled map[*graph.Graph]int64
}

func (s *streamExecutor) DeviceStep() accum.StepFn { return s.t.deviceGradientsFn() }

func (s *streamExecutor) Stats() Stats {
	if s.last == nil {
		return nil
	}
	return s.last
}

// start creates the host engine, the variables (on the host) and the programs.
func (s *streamExecutor) start() error {
	t := s.t
	s.stageLayout = newStageLayout(t)
	host, _, err := hostengine.NewBackend()
	if err != nil {
		return fmt.Errorf("Config.Offload params: the host engine: %w", err)
	}
	s.host = host
	s.compiled = map[*graph.Graph]int64{}
	if err := s.discover(); err != nil {
		return err
	}
	if err := t.Ctx.InitializeVariables(s.host, nil); err != nil {
		return fmt.Errorf("Config.Offload params: initializing the weights on the host: %w", err)
	}
	if err := s.startHost(); err != nil {
		return err
	}
	s.embed, s.block, s.head = s.newStage("embed", s.embedVars), s.newStage("block", s.blockVars[0]), s.newStage("head", s.headVars)
	for kind, st := range []*streamStage{s.embed, s.block, s.head} {
		if err := s.compile(st, stageKind(kind)); err != nil {
			return err
		}
	}
	return nil
}

// startHost prepares the host update of the trainable variables (creating and initializing the
// optimizer's state on the host engine).
func (s *streamExecutor) startHost() error {
	var err error
	if s.update, err = newHostUpdate(s.t, s.host, map[string][]*context.Variable{"all": s.trainable}, []string{"all"}); err != nil {
		return fmt.Errorf("Config.Offload params: the host update: %w", err)
	}
	return nil
}

// run runs one streamed step.
func (s *streamExecutor) Run(batch []*tensors.Tensor) ([]*tensors.Tensor, *graph.Graph, error) {
	if s.host == nil {
		if err := s.start(); err != nil {
			s.Close()
			return nil, nil, err
		}
	}
	sp := &streamPass{s: s, k: s.t.Config.microBatches()}
	defer sp.free()
	if err := sp.forward(batch); err != nil {
		return nil, nil, err
	}
	if err := sp.backward(); err != nil {
		return nil, nil, err
	}
	return sp.update()
}

func (s *streamExecutor) Close() {
	for _, st := range []*streamStage{s.embed, s.block, s.head} {
		if st == nil {
			continue
		}
		s.unbind(st)
		for _, e := range []*context.Exec{st.fwd, st.bwd} {
			if e != nil {
				e.Finalize()
			}
		}
		if st.add != nil {
			st.add.Finalize()
		}
	}
	if s.update != nil {
		s.update.close()
	}
	if s.host != nil {
		s.host.Finalize()
	}
	s.embed, s.block, s.head, s.update, s.host = nil, nil, nil, nil, nil
	s.stageLayout = nil
}
