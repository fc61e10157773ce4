package train

import (
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/gomlx/gomlx/pkg/ml/context/checkpoints"
)

// RunOptions configure Run.
type RunOptions struct {
	// Steps is the global step to train up to: a run resumed at step 40 with Steps 100 does 60.
	Steps int
	// Progress receives one line every LogEvery steps (and for the first and last), with the step
	// rate; nil prints nothing.
	Progress io.Writer
	LogEvery int
	// CheckpointDir, when set, is loaded before training if it holds a checkpoint (resuming
	// exactly where it stopped) and saved every SaveEvery steps and at the end.
	CheckpointDir string
	SaveEvery     int
}

// History is the record of a run.
type History struct {
	Steps []StepMetrics `json:"steps"`
	// Resumed is the global step the run started from (0 for a fresh run).
	Resumed int `json:"resumed"`
	// CompileSeconds is the first step's time (building, compiling, initializing, running);
	// StepSeconds the mean time of the other steps.
	CompileSeconds float64 `json:"compile_seconds"`
	StepSeconds    float64 `json:"step_seconds"`
	// TokensPerSecond counts predictions (tokens for gpt, examples for mlp) per second of steady
	// state.
	TokensPerSecond float64 `json:"tokens_per_second"`
}

// Run trains up to opts.Steps global steps on data and returns what happened. Interrupted runs
// resume bit-exactly from their checkpoint: the batches depend only on the step, and the weights,
// optimizer state, loss scale and random state are all saved.
func (t *Trainer) Run(data Data, opts RunOptions) (*History, error) {
	var handler *checkpoints.Handler
	if opts.CheckpointDir != "" {
		var err error
		if handler, err = checkpoints.Build(t.Ctx).Dir(opts.CheckpointDir).Keep(2).Done(); err != nil {
			return nil, fmt.Errorf("checkpoint folder %q: %w", opts.CheckpointDir, err)
		}
	}
	h := &History{Resumed: t.GlobalStep()}
	if h.Resumed > 0 {
		// The checkpoint created the variables already: the step's graph finds them instead.
		t.Ctx = t.Ctx.Checked(false)
	}
	if opts.LogEvery < 1 {
		opts.LogEvery = max(1, opts.Steps/20)
	}
	if opts.Progress != nil {
		if h.Resumed > 0 {
			fmt.Fprintf(opts.Progress, "resuming from step %d (%s)\n", h.Resumed, opts.CheckpointDir)
		}
		fmt.Fprintf(opts.Progress, "training on %s\n", data.Describe())
	}
	var steady time.Duration
	var steadyCount float64
	for step := h.Resumed; step < opts.Steps; step++ {
		start := time.Now()
		m, err := t.Step(data.Batch(step))
		if err != nil {
			return h, err
		}
		elapsed := time.Since(start)
		if step == h.Resumed {
			h.CompileSeconds = elapsed.Seconds()
		} else {
			steady += elapsed
			steadyCount += m.Count
		}
		h.Steps = append(h.Steps, m)
		if opts.Progress != nil && (m.Step%opts.LogEvery == 0 || step == h.Resumed || m.Step == opts.Steps) {
			t.logStep(opts.Progress, m, opts.Steps, elapsed, step == h.Resumed)
		}
		if handler != nil && opts.SaveEvery > 0 && m.Step%opts.SaveEvery == 0 {
			if err := handler.Save(); err != nil {
				return h, fmt.Errorf("saving checkpoint at step %d: %w", m.Step, err)
			}
		}
	}
	if n := len(h.Steps) - 1; n > 0 {
		h.StepSeconds = steady.Seconds() / float64(n)
		h.TokensPerSecond = steadyCount / steady.Seconds()
	}
	if handler != nil && len(h.Steps) > 0 {
		if err := handler.Save(); err != nil {
			return h, fmt.Errorf("saving the final checkpoint: %w", err)
		}
	}
	return h, nil
}

func (t *Trainer) logStep(w io.Writer, m StepMetrics, total int, elapsed time.Duration, first bool) {
	width := 30
	done := width * m.Step / max(total, 1)
	bar := fmt.Sprintf("[%s%s]", strings.Repeat("█", done), strings.Repeat("·", width-done))
	rate := fmt.Sprintf("%.2f steps/s, %s/s", 1/elapsed.Seconds(), countUnit(m.Count/elapsed.Seconds(), t.Config.Model))
	if first {
		rate = fmt.Sprintf("first step %.1fs (builds and compiles the step)", elapsed.Seconds())
	}
	metrics := ""
	for _, name := range t.Model.MetricNames() {
		metrics += fmt.Sprintf("  %s %.3f", name, m.Metrics[name])
	}
	if m.Skipped {
		metrics += "  skipped (non-finite gradients)"
	}
	fmt.Fprintf(w, "%s step %4d/%d  loss %.4f%s  %s\n", bar, m.Step, total, m.Loss, metrics, rate)
}

// WriteSummary writes a final table of the run.
func (h *History) WriteSummary(w io.Writer, model string) {
	if len(h.Steps) == 0 {
		fmt.Fprintln(w, "no steps run")
		return
	}
	first, last := h.Steps[0], h.Steps[len(h.Steps)-1]
	fmt.Fprintf(w, "\n%-22s %s\n", "steps", fmt.Sprintf("%d to %d", first.Step, last.Step))
	fmt.Fprintf(w, "%-22s %.4f -> %.4f\n", "loss", first.Loss, last.Loss)
	for name, v := range first.Metrics {
		fmt.Fprintf(w, "%-22s %.3f -> %.3f\n", name, v, last.Metrics[name])
	}
	fmt.Fprintf(w, "%-22s %.1f s\n", "first step", h.CompileSeconds)
	if h.StepSeconds > 0 {
		fmt.Fprintf(w, "%-22s %.3f s (%s/s)\n", "later steps, mean", h.StepSeconds, countUnit(h.TokensPerSecond, model))
	}
}

func countUnit(perSecond float64, model string) string {
	unit := "examples"
	if model == "gpt" {
		unit = "tokens"
	}
	switch {
	case perSecond >= 1e6:
		return fmt.Sprintf("%.2fM %s", perSecond/1e6, unit)
	case perSecond >= 1e3:
		return fmt.Sprintf("%.1fk %s", perSecond/1e3, unit)
	}
	return fmt.Sprintf("%.0f %s", perSecond, unit)
}
