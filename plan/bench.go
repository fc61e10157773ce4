package plan

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/gomlx/gomlx/backends"

	"github.com/onegpu/onegpu/analysis"
	"github.com/onegpu/onegpu/data"
	"github.com/onegpu/onegpu/internal/heapmeter"
	"github.com/onegpu/onegpu/train"
)

// Measured is one configuration of a benchmarked grid: its estimate and, when its steps ran,
// their time (and on the embedded backend their heap peak).
type Measured struct {
	Variant
	// Attention and CrossEntropy are set in a grid of chunkings (BenchChunkings): the row's forms
	// of --attention and --cross-entropy.
	Attention    string `json:"attention,omitempty"`
	CrossEntropy string `json:"cross_entropy,omitempty"`
	Estimate
	// MeasuredPeakBytes is the heap peak above the step's inputs on the embedded backend (the
	// least of two measured steps); 0 when not measured.
	MeasuredPeakBytes int64   `json:"measured_peak_bytes,omitempty"`
	StepSeconds       float64 `json:"step_seconds,omitempty"`
	TokensPerSecond   float64 `json:"tokens_per_second,omitempty"`
	// Ratios to the first row (the tutorial's grid: float32, no remat, 1 micro-batch; a grid of
	// chunkings: plain attention and loss).
	PeakRatio, ActivationRatio, TimeRatio float64
	Error                                 string `json:"error,omitempty"`
}

// BenchOptions says how Bench measures each configuration.
type BenchOptions struct {
	// Steps is the number of timed steps (after one that compiles); 0 runs nothing (estimates only).
	Steps int
	// Compile also compiles each step for XLA's memory statistics (an XLA backend).
	Compile bool
	// MeasureHeap measures each step's heap peak (the embedded backend).
	MeasureHeap bool
	// Progress, when set, gets one line per configuration.
	Progress io.Writer
}

// Bench estimates every variant of TutorialGrid applied to base (a GPT config) and, with
// opts.Steps > 0, runs and times it on synthetic tokens; ratios are to the first row. A
// configuration that fails carries its error and the others still run.
func Bench(backend backends.Backend, base train.Config, opts BenchOptions) []Measured {
	var rows []benchRow
	for _, v := range TutorialGrid() {
		config, err := v.Apply(base)
		rows = append(rows, benchRow{Measured{Variant: v}, config, err})
	}
	return measure(backend, rows, opts)
}

// BenchChunkings is Bench over chunkings of base (e.g. AllChunkings: plain and chunked attention
// and cross-entropy) at base's policy, remat and micro-batches; ratios are to the first
// chunking's row. With opts.Compile each row reports XLA's compile time (Estimate.CompileSeconds).
func BenchChunkings(backend backends.Backend, base train.Config, chunkings []Chunking, opts BenchOptions) []Measured {
	v := Variant{Compute: strings.ToLower(base.Policy.Compute.String()), Remat: base.Remat.String(), MicroBatches: max(base.MicroBatches, 1)}
	var rows []benchRow
	for _, k := range chunkings {
		config := k.Apply(base)
		rows = append(rows, benchRow{Measured{Variant: v, Attention: k.Attention.String(), CrossEntropy: k.CrossEntropy.String()}, config, config.Validate()})
	}
	return measure(backend, rows, opts)
}

// benchRow is one configuration to measure, or the error that keeps it from being built.
type benchRow struct {
	Measured
	config train.Config
	err    error
}

// measure estimates and times each row, and sets the ratios to the first.
func measure(backend backends.Backend, configs []benchRow, opts BenchOptions) []Measured {
	var rows []Measured
	for _, c := range configs {
		row, err := c.Measured, c.err
		if err == nil {
			row.Estimate, err = EstimateStep(backend, c.config, opts.Compile)
		}
		if err == nil && opts.Steps > 0 {
			err = timeSteps(backend, c.config, opts, &row)
		}
		if err != nil {
			row.Error = err.Error()
		}
		if opts.Progress != nil {
			name := row.Variant.String()
			if row.Attention != "" {
				name = fmt.Sprintf("attention %-16s cross-entropy %-12s", row.Attention, row.CrossEntropy)
			}
			fmt.Fprintf(opts.Progress, "  %s  estimated peak %10s  %s\n", name, analysis.FormatBytes(row.PeakBytes), row.summary())
		}
		rows = append(rows, row)
	}
	baseline := rows[0]
	for i := range rows {
		r := &rows[i]
		r.PeakRatio = ratio(r.PeakBytes, baseline.PeakBytes)
		r.ActivationRatio = ratio(r.ActivationBytes, baseline.ActivationBytes)
		if baseline.StepSeconds > 0 {
			r.TimeRatio = r.StepSeconds / baseline.StepSeconds
		}
	}
	return rows
}

// timeSteps runs opts.Steps train steps after a compiling one and records their median time and,
// with opts.MeasureHeap, the heap peak of a step.
func timeSteps(backend backends.Backend, config train.Config, opts BenchOptions, row *Measured) error {
	trainer, err := train.New(backend, config)
	if err != nil {
		return err
	}
	defer trainer.Close()
	lm, ok := config.Model.(train.LanguageModel)
	if !ok {
		return fmt.Errorf("bench trains a language model on synthetic tokens, not %T", config.Model)
	}
	seqLen, vocab := lm.TokenShape()
	batches, err := data.NewSyntheticTokens(config.Batch, seqLen, vocab, config.Seed)
	if err != nil {
		return err
	}
	if _, err := trainer.Step(batches.Batch(0)); err != nil { // compiles
		return err
	}
	var times []float64
	var count float64
	for i := range opts.Steps {
		start := time.Now()
		m, err := trainer.Step(batches.Batch(i + 1))
		if err != nil {
			return err
		}
		times = append(times, time.Since(start).Seconds())
		count = m.Count
	}
	slices.Sort(times)
	row.StepSeconds = times[len(times)/2]
	row.TokensPerSecond = count / row.StepSeconds
	if opts.MeasureHeap {
		for range 2 { // the least of two: freed buffers awaiting a collection only add
			h, err := heapmeter.MeasurePeak(func() error { _, err := trainer.Step(batches.Batch(0)); return err })
			if err != nil {
				return err
			}
			if row.MeasuredPeakBytes == 0 || h.AboveBaseline() < row.MeasuredPeakBytes {
				row.MeasuredPeakBytes = h.AboveBaseline()
			}
		}
	}
	return nil
}

func (r Measured) summary() string {
	switch {
	case r.Error != "":
		return "error: " + r.Error
	case r.StepSeconds > 0 && r.CompileSeconds > 0:
		return fmt.Sprintf("compile %.1fs, step %.2fs", r.CompileSeconds, r.StepSeconds)
	case r.StepSeconds > 0:
		return fmt.Sprintf("step %.2fs", r.StepSeconds)
	case r.CompileSeconds > 0:
		return fmt.Sprintf("compile %.1fs", r.CompileSeconds)
	}
	return ""
}

func ratio(a, b int64) float64 {
	if b == 0 {
		return 0
	}
	return float64(a) / float64(b)
}
