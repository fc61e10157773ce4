package train

import (
	"fmt"
	"io"
	"time"

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
//     to the host in the background (stream_download.go) while the device goes on;
//   - a LoRA run's frozen base (Config.LoRA: float in BaseDType, or quantized for QLoRA, NF4's
//     0.52 bytes a parameter) stays in host memory as it is and crosses the bus with its stage, once
//     per step and direction; it takes no gradient and no host update: only the adapters do. A
//     stage without trainable variables (the embedding, under LoRA) is not run backward;
//   - the host update (hostUpdate, the optimizer offload's: the run's chain, loss-scale check and
//     atomic skip, clipping, Adam, 8-bit Adam, Adafactor) updates each stage as soon as its
//     gradients are on the host, while the device computes the next stage's backward pass
//     (stream_host.go): under a loss scale or a clip, which need every gradient, it speculates
//     and puts back from an undo record what the step's decision does not keep, so every weight
//     ends as in the update after the whole backward pass (Config.SerialHostUpdate), bit for bit.
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
	// DownloadSeconds is the gradients' transfers' time (the step waits for them); HostWaitSeconds
	// the time the step waited for the host update after the backward pass (all of HostSeconds
	// when serialized; the last stage's update and what the host had not finished when
	// overlapped); StepSeconds the step's wall time. Overlapped says the host updated each stage
	// while the device computed the next (Config.SerialHostUpdate false).
	DownloadSeconds float64 `json:"download_seconds"`
	HostWaitSeconds float64 `json:"host_wait_seconds"`
	StepSeconds     float64 `json:"step_seconds"`
	Overlapped      bool    `json:"overlapped"`
	// OverlapRatio is StepSeconds over the step's longest part (DeviceSeconds, BusSeconds,
	// HostSeconds, each measured in the same step): 1 when the parts overlap perfectly, their sum
	// over the longest when they run one after the other.
	OverlapRatio float64 `json:"overlap_ratio"`
	// Speculated counts the host stages updated before the step's decision (under a loss scale or
	// a clip), Undone those of them the decision put back (a skipped step, an active clip).
	Speculated int `json:"speculated,omitempty"`
	Undone     int `json:"undone,omitempty"`
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
		return []*float64{&s.TransferSeconds, &s.HostSeconds, &s.UploadSeconds, &s.DeviceSeconds, &s.DownloadSeconds, &s.HostWaitSeconds, &s.StepSeconds}
	})
	m.DevicePeakBytes = s.DevicePeakBytes
	for _, l := range later {
		m.DevicePeakBytes = max(m.DevicePeakBytes, l.(*StreamStats).DevicePeakBytes)
	}
	m.OverlapRatio = m.overlapRatio()
	return m
}

// BusSeconds is the busier direction of the bus: the weights' uploads or the gradients'
// downloads (each direction has its own lanes).
func (s *StreamStats) BusSeconds() float64 { return max(s.UploadSeconds, s.DownloadSeconds) }

// overlapRatio is OverlapRatio from the times (0 without a step time).
func (s *StreamStats) overlapRatio() float64 {
	longest := max(s.DeviceSeconds, s.BusSeconds(), s.HostSeconds)
	if longest <= 0 || s.StepSeconds <= 0 {
		return 0
	}
	return s.StepSeconds / longest
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
	how := "overlapped with the device"
	if !s.Overlapped {
		how = "serialized, after the backward pass"
	}
	fmt.Fprintf(w, "%-22s %.1f ms a step, %.2fx its longest part; host update %s (waited %.1f ms after the backward pass)\n",
		"streamed step", 1e3*s.StepSeconds, s.OverlapRatio, how, 1e3*s.HostWaitSeconds)
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
	// hostAt are the host update's stages by position in the backward pass (backwardOrder), nil
	// for an instance without trainable variables of its own.
	hostAt []*hostengine.Stage
	// compiled is each program's device memory by XLA's account, once known.
	compiled map[*graph.Graph]int64
	// syncDownloads brings each stage's gradient sums to the host before the next stage runs
	// (stream_download.go): under a device budget, in the first step and while a step's peak
	// without sums on their way plus the largest stage's sums (largestSums) exceeds the budget.
	syncDownloads bool
	largestSums   int64
	// copies are the bfloat16 copies of the masters the stages read in bfloat16, which go over
	// the bus in their place (stream_narrow.go); nil when none do.
	copies *narrowCopies
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
	s.syncDownloads = t.Config.DeviceBudget > 0
	if err := s.discover(); err != nil {
		return err
	}
	if err := t.Ctx.InitializeVariables(s.host, nil); err != nil {
		return fmt.Errorf("Config.Offload params: initializing the weights on the host: %w", err)
	}
	if err := s.startHost(); err != nil {
		return err
	}
	if s.copies, err = s.newNarrowCopies(); err != nil {
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

// run runs one streamed step.
func (s *streamExecutor) Run(batch []*tensors.Tensor) ([]*tensors.Tensor, *graph.Graph, error) {
	if s.host == nil {
		if err := s.start(); err != nil {
			s.Close()
			return nil, nil, err
		}
	}
	if s.copies != nil {
		s.copies.next()
	}
	sp := &streamPass{s: s, k: s.t.Config.microBatches(), start: time.Now()}
	if !s.t.Config.SerialHostUpdate {
		sp.host = s.startHostRun()
	}
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
	if s.copies != nil {
		s.copies.close()
	}
	s.stageLayout, s.hostAt, s.copies = nil, nil, nil
}
