package train_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/gomlx/gomlx/pkg/ml/context"

	"github.com/onegpu/onegpu/accum"
	"github.com/onegpu/onegpu/data"
	"github.com/onegpu/onegpu/train"
)

// countingMode is a mode of the test's own, registered as a new mode would be (one file: its
// executor, its statistics, one RegisterMode call): the whole step as one program, reporting how
// many steps its executor ran.
type countingExecutor struct {
	t     *train.Trainer
	exec  *context.Exec
	steps int
}

func (e *countingExecutor) DeviceStep() accum.StepFn { return e.t.StepFn() }

func (e *countingExecutor) Run(batch []*tensors.Tensor) ([]*tensors.Tensor, *graph.Graph, error) {
	if e.exec == nil {
		exec, err := context.NewExec(e.t.Backend, e.t.Ctx, e.t.StepFn())
		if err != nil {
			return nil, nil, err
		}
		e.exec = exec
	}
	e.steps++
	in := make([]any, len(batch))
	for i, b := range batch {
		in[i] = b
	}
	return e.exec.ExecWithGraph(in...)
}

func (e *countingExecutor) Stats() train.Stats { return &countingStats{Steps: e.steps} }

func (e *countingExecutor) Close() {
	if e.exec != nil {
		e.exec.Finalize()
	}
}

type countingStats struct {
	Steps int `json:"steps"`
}

func (s *countingStats) Mean(later []train.Stats) train.Stats {
	if len(later) == 0 {
		return s
	}
	return later[len(later)-1]
}

func (s *countingStats) WriteSummary(w io.Writer) {
	fmt.Fprintf(w, "%-22s %d\n", "counted steps", s.Steps)
}

func init() {
	train.RegisterMode("tally", train.Mode{New: func(t *train.Trainer) train.Executor { return &countingExecutor{t: t} },
		Stats: func() train.Stats { return &countingStats{} }})
}

// TestRegisteredMode: a mode registered by name runs the step when Config.Offload names it (and
// ParseOffload reads its name); the loop keeps what it reports, prints its summary and writes it
// to JSON that reads back into its type. An unknown mode is refused by New, naming the modes.
func TestRegisteredMode(t *testing.T) {
	mode, err := train.ParseOffload("tally")
	if err != nil || !strings.Contains(strings.Join(train.ModeNames(), " "), "none optimizer params staged tally") {
		t.Fatalf("ParseOffload(tally) = %q, %v; modes %v", mode, err, train.ModeNames())
	}
	config := frozenConfig()
	config.Offload = mode
	tr, err := train.New(embedded(), config)
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	batches, err := data.NewClassifierBatch(16, 8, 4, 5)
	if err != nil {
		t.Fatal(err)
	}
	h, err := tr.Run(batches, train.RunOptions{Steps: 3})
	if err != nil {
		t.Fatal(err)
	}
	if s, ok := h.Offload.(*countingStats); !ok || s.Steps != 3 || h.Mode != "tally" {
		t.Fatalf("the run's executor statistics %#v (mode %q), want the tally mode's 3 steps", h.Offload, h.Mode)
	}
	var summary bytes.Buffer
	h.WriteSummary(&summary)
	if !strings.Contains(summary.String(), "counted steps          3") {
		t.Errorf("the summary lacks the mode's line:\n%s", summary.String())
	}
	text, err := json.Marshal(h)
	if err != nil {
		t.Fatal(err)
	}
	var back train.History
	if err := json.Unmarshal(text, &back); err != nil {
		t.Fatal(err)
	}
	if s, ok := back.Offload.(*countingStats); !ok || s.Steps != 3 || len(back.Steps) != 3 {
		t.Errorf("read back from %s: %#v", text, back)
	}
	config.Offload = "nowhere"
	if _, err := train.New(embedded(), config); err == nil || !strings.Contains(err.Error(), `unknown Config.Offload "nowhere": use none or optimizer or params or staged or tally`) {
		t.Errorf("an unknown mode: %v", err)
	}
}

// TestStatsMean: a run's figures are its later steps' mean times, its last step's bytes and (for
// a streamed run) the largest footprint of all its steps; the first step's alone when it is the
// only one.
func TestStatsMean(t *testing.T) {
	first := &train.StreamStats{BytesToDevice: 9, TransferSeconds: 100, DevicePeakBytes: 5}
	later := []train.Stats{
		&train.StreamStats{BytesToDevice: 1, BytesToHost: 2, TransferSeconds: 2, HostSeconds: 1, UploadSeconds: 4, DeviceSeconds: 6, DevicePeakBytes: 7},
		&train.StreamStats{BytesToDevice: 3, BytesToHost: 4, TransferSeconds: 4, HostSeconds: 3, UploadSeconds: 2, DeviceSeconds: 8, DevicePeakBytes: 6},
	}
	want := train.StreamStats{BytesToDevice: 3, BytesToHost: 4, TransferSeconds: 3, HostSeconds: 2, UploadSeconds: 3, DeviceSeconds: 7, DevicePeakBytes: 7}
	if got := first.Mean(later).(*train.StreamStats); *got != want {
		t.Errorf("streamed: %+v, want %+v", *got, want)
	}
	if got := first.Mean(nil); got != first {
		t.Errorf("streamed, one step: %+v, want the first step's", got)
	}
	o := &train.OffloadStats{BytesToDevice: 9, TransferSeconds: 100}
	offloaded := []train.Stats{&train.OffloadStats{BytesToDevice: 1, BytesToHost: 2, TransferSeconds: 1, HostSeconds: 5},
		&train.OffloadStats{BytesToDevice: 1, BytesToHost: 2, TransferSeconds: 3, HostSeconds: 7}}
	if got := *o.Mean(offloaded).(*train.OffloadStats); got != (train.OffloadStats{BytesToDevice: 1, BytesToHost: 2, TransferSeconds: 2, HostSeconds: 6}) {
		t.Errorf("optimizer offloaded: %+v", got)
	}
}
