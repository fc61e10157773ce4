package train

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"math"
	"strings"
	"time"

	"github.com/onegpu/onegpu/data"
	"github.com/onegpu/onegpu/internal/progress"
	"github.com/onegpu/onegpu/train/checkpoint"
)

// RunOptions configure Run.
type RunOptions struct {
	// Steps is the step count (Trainer.Steps) to train up to: a run resumed at step 40 with Steps
	// 100 does 60.
	Steps int
	// Progress receives one line every LogEvery steps (and for the first and last), with the step
	// rate; nil prints nothing.
	Progress io.Writer
	LogEvery int
	// Checkpoints, when set, is a folder opened with OpenCheckpoints: Run resumes from it, saves
	// every SaveEvery steps and at the end, and leaves it open. CheckpointDir is the simple form:
	// Run opens the folder (keeping Keep checkpoints, default 2) and closes it.
	Checkpoints   *checkpoint.Folder
	CheckpointDir string
	Keep          int
	SaveEvery     int
	// Overwrite lets Run open CheckpointDir although it holds weights that no whole onegpu
	// checkpoint accounts for (checkpoint.Options.Overwrite): the run writes next to them and
	// never deletes them.
	Overwrite bool
	// AllowOtherData lets a run resume from a checkpoint trained on other data than the batches
	// given to Run (what a checkpoint records of its data: DataRecord); without it Run refuses with
	// a *checkpoint.DataMismatchError before anything is loaded.
	AllowOtherData bool
	// Stop, when closed, ends the run after the current step: Run saves and returns an
	// *InterruptedError.
	Stop <-chan struct{}
	// Eval, when set, is evaluated (Trainer.Evaluate) every EvalEvery steps (default: LogEvery)
	// and after the last step: the validation loss in the progress line, History.Eval and the
	// summary. data.Packed is one (evaluation data of its own, or a share of the documents held
	// out: TokenizedText.Split).
	Eval      Evaluation
	EvalEvery int
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
	// state; CountUnit names them (the model's CountUnit: "tokens", "examples").
	TokensPerSecond float64 `json:"tokens_per_second"`
	CountUnit       string  `json:"count_unit"`
	// Offload is what the run's executor reports (Executor.Stats: OffloadStats with the optimizer
	// offloaded, StreamStats streamed), over the steps after the first (the first alone when there
	// is no other), and Mode the executor's mode (Config.Offload); nil and "" when it reports
	// nothing.
	Offload Stats  `json:"offload,omitempty"`
	Mode    string `json:"offload_mode,omitempty"`
	// Eval is the loss on the evaluation data (RunOptions.Eval) after the steps it was evaluated
	// at.
	Eval []EvalPoint `json:"eval,omitempty"`
}

// InterruptedError is returned by Run when RunOptions.Stop was closed.
type InterruptedError struct {
	Step  int
	Saved bool // a checkpoint of Step was written
}

func (e *InterruptedError) Error() string {
	if e.Saved {
		return fmt.Sprintf("interrupted at step %d, saved", e.Step)
	}
	return fmt.Sprintf("interrupted at step %d, not saved (no checkpoint folder, RunOptions.CheckpointDir, or no step done)", e.Step)
}

// DivergedError is returned by Run when a step's loss or a saved value is not finite: the run
// stops without saving, so the folder keeps its last finite checkpoint.
type DivergedError struct {
	Step      int
	Reason    string
	LastSaved int // the step of the newest checkpoint, -1 when there is none
}

func (e *DivergedError) Error() string {
	kept := "no checkpoint was written"
	if e.LastSaved >= 0 {
		kept = fmt.Sprintf("the checkpoint of step %d is kept", e.LastSaved)
	}
	return fmt.Sprintf("the run diverged at step %d (%s) and stopped without saving; %s: lower the learning rate (Config.Schedule) or add a dynamic loss scale (Config.LossScale)",
		e.Step, e.Reason, kept)
}

// Run trains up to opts.Steps steps on batches and returns what happened (the history so far also
// when it fails). Step i trains on batches.Batch(i), whether its update is applied or skipped
// (Trainer.Steps). Interrupted runs resume bit-exactly from their checkpoint: the batches depend
// only on the step, and the weights, optimizer state, counters, loss scale and random state are
// all saved. A LoRA run's checkpoints hold its adapters, not its frozen base, whose SHA-256 they
// record: the resumed run makes the base again (SetWeights, or the seed) and is refused with a
// *checkpoint.BaseMismatchError when it is another. A checkpoint whose variables are not the model's (other sizes) is refused by name.
// A step whose loss is not finite, or whose weights or optimizer state are not finite at a save,
// stops the run with a *DivergedError before anything is saved.
func (t *Trainer) Run(batches data.Data, opts RunOptions) (*History, error) {
	if batches == nil {
		return nil, fmt.Errorf("Trainer.Run: no data (nil): give a data.Data, e.g. data.NewText(data.Corpus, batch, seqLen, seed)")
	}
	store := opts.Checkpoints
	if store == nil && opts.CheckpointDir != "" {
		var err error
		options := checkpoint.Options{Keep: cmp.Or(opts.Keep, 2), Overwrite: opts.Overwrite}
		if store, err = OpenCheckpointsWith(opts.CheckpointDir, t.Config, options); err != nil {
			return nil, err
		}
		defer store.Close()
	}
	// A trainer that already ran steps continues from its step count, unless a checkpoint is
	// restored.
	h := &History{Resumed: t.Steps(), CountUnit: countUnitOf(t.Config.Model)}
	lastSaved := -1
	if store != nil {
		if len(store.Skipped) > 0 && opts.Progress != nil {
			fmt.Fprintf(opts.Progress, "skipped damaged or partial checkpoints in %s:\n  %s\n", store.Dir(), strings.Join(store.Skipped, "\n  "))
		}
		if len(store.Foreign) > 0 && opts.Progress != nil {
			fmt.Fprintf(opts.Progress, "writing next to weights no whole checkpoint accounts for in %s (kept, never deleted):\n  %s\n",
				store.Dir(), strings.Join(store.Foreign, "\n  "))
		}
		if err := store.CheckData(DataRecord(batches), opts.AllowOtherData); err != nil {
			return nil, err
		}
		if store.ResumeFrom != "" {
			if err := t.checkVariables(store); err != nil {
				return nil, err
			}
		}
		if t.Config.LoRA.Active() {
			// The base is made (from SetWeights' weights or the seed) and compared before the
			// checkpoint's adapters are loaded onto it.
			if err := t.prepareBase(); err != nil {
				return nil, err
			}
			if err := store.CheckBase(t.base.sha256, t.base.from); err != nil {
				return nil, err
			}
		}
		if _, err := store.Restore(t.Ctx); err != nil {
			return nil, err
		}
		if store.ResumeFrom != "" {
			// The restored counters say how many batches were taken, skipped steps included.
			h.Resumed = t.Steps()
			if err := t.checkResumedStep(store); err != nil {
				return nil, err
			}
			lastSaved = h.Resumed
		}
	}
	if h.Resumed > opts.Steps {
		where := "the trainer has"
		if store != nil && store.ResumeFrom != "" {
			where = fmt.Sprintf("the checkpoint %s in %s has", store.ResumeFrom, store.Dir())
		}
		return h, fmt.Errorf("%s taken %d steps, past the %d asked for (RunOptions.Steps): nothing to train; "+
			"ask for more than %d steps to train further, or use another checkpoint folder", where, h.Resumed, opts.Steps, h.Resumed)
	}
	if h.Resumed > 0 {
		// The checkpoint created the variables already: the step's graph finds them instead.
		t.Ctx = t.Ctx.Checked(false)
	}
	if opts.LogEvery < 1 {
		opts.LogEvery = max(1, opts.Steps/20)
	}
	if opts.Eval != nil {
		if err := t.checkEvaluate(); err != nil {
			return h, err
		}
		if opts.EvalEvery < 1 {
			opts.EvalEvery = opts.LogEvery
		}
	}
	if opts.Progress != nil {
		if h.Resumed > 0 && store != nil {
			fmt.Fprintf(opts.Progress, "resuming from step %d (%s)\n", h.Resumed, store.Dir())
		}
		if h.Resumed == opts.Steps {
			fmt.Fprintf(opts.Progress, "the run is at step %d, the steps asked for: nothing to train; raise RunOptions.Steps to train further\n",
				h.Resumed)
		} else {
			fmt.Fprintf(opts.Progress, "training on %s\n", batches.Describe())
		}
	}
	// A checkpoint is staged after its step and committed once the next step's loss is finite
	// (or the run ends), so that diverging weights never replace good checkpoints.
	stage := func(step int) error {
		if store == nil || len(h.Steps) == 0 || step == lastSaved || step == store.Pending() {
			return nil
		}
		if err := store.Stage(t.Ctx, step); err != nil {
			var nonFinite *checkpoint.NonFiniteError
			if errors.As(err, &nonFinite) {
				return &DivergedError{Step: step, Reason: nonFinite.Error(), LastSaved: lastSaved}
			}
			return err
		}
		return nil
	}
	commit := func() error {
		if store == nil || store.Pending() < 0 {
			return nil
		}
		step := store.Pending()
		if err := store.Commit(); err != nil {
			return err
		}
		lastSaved = step
		return nil
	}
	save := func(step int) error {
		if err := stage(step); err != nil {
			return err
		}
		return commit()
	}
	var steady time.Duration
	var steadyCount float64
	var first Stats   // the executor's report of the run's first step
	var later []Stats // and of the steps after it
	defer func() {    // also for a run that stops early: its history is reported
		if n := len(h.Steps) - 1; n > 0 {
			h.StepSeconds = steady.Seconds() / float64(n)
			h.TokensPerSecond = steadyCount / steady.Seconds()
		}
		if first != nil {
			h.Offload, h.Mode = first.Mean(later), t.Config.Offload.String()
		}
	}()
	for step := h.Resumed; step < opts.Steps; step++ {
		select {
		case <-opts.Stop:
			err := save(step)
			if err != nil {
				return h, err
			}
			return h, &InterruptedError{Step: step, Saved: lastSaved == step}
		default:
		}
		start := time.Now()
		m, err := t.Step(batches.Batch(step))
		if err != nil {
			return h, err
		}
		elapsed := time.Since(start)
		stats := t.ExecutorStats()
		if step == h.Resumed {
			h.CompileSeconds = elapsed.Seconds()
			first = stats
		} else {
			steady += elapsed
			steadyCount += m.Count
			if stats != nil {
				later = append(later, stats)
			}
		}
		h.Steps = append(h.Steps, m)
		var eval *EvalPoint
		if opts.Eval != nil && (m.Step%opts.EvalEvery == 0 || m.Step == opts.Steps) {
			p, err := t.Evaluate(opts.Eval)
			if err != nil {
				return h, err
			}
			h.Eval, eval = append(h.Eval, p), &p
		}
		if opts.Progress != nil && (m.Step%opts.LogEvery == 0 || step == h.Resumed || m.Step == opts.Steps || eval != nil) {
			t.logStep(opts.Progress, m, eval, opts.Steps, elapsed, step == h.Resumed)
		}
		// A skipped step (non-finite gradients under a loss scale) left the weights as they were.
		if !m.Skipped && (math.IsNaN(m.Loss) || math.IsInf(m.Loss, 0)) {
			if store != nil {
				if err := store.Discard(); err != nil {
					return h, err
				}
			}
			return h, &DivergedError{Step: m.Step, Reason: fmt.Sprintf("loss %g", m.Loss), LastSaved: lastSaved}
		}
		if err := commit(); err != nil {
			return h, err
		}
		if opts.SaveEvery > 0 && m.Step%opts.SaveEvery == 0 {
			if err := stage(m.Step); err != nil {
				return h, err
			}
		}
	}
	if len(h.Steps) > 0 {
		if err := save(h.Steps[len(h.Steps)-1].Step); err != nil {
			return h, err
		}
	}
	return h, nil
}

func (t *Trainer) logStep(w io.Writer, m StepMetrics, eval *EvalPoint, total int, elapsed time.Duration, first bool) {
	bar := progress.Bar(m.Step, total, 30)
	rate := fmt.Sprintf("%.2f steps/s, %s/s", 1/elapsed.Seconds(), perSecond(m.Count/elapsed.Seconds(), countUnitOf(t.Config.Model)))
	if first {
		rate = fmt.Sprintf("first step %.1fs (builds and compiles the step)", elapsed.Seconds())
	}
	metrics := ""
	for _, name := range t.Config.Model.MetricNames() {
		metrics += fmt.Sprintf("  %s %.3f", name, m.Metrics[name])
	}
	if m.Skipped {
		metrics += "  skipped (non-finite gradients)"
	}
	if eval != nil {
		metrics += fmt.Sprintf("  eval loss %.4f", eval.Loss)
	}
	fmt.Fprintf(w, "%s step %4d/%d  loss %.4f%s  %s\n", bar, m.Step, total, m.Loss, metrics, rate)
}

// WriteSummary writes a final table of the run.
func (h *History) WriteSummary(w io.Writer) {
	if len(h.Steps) == 0 {
		fmt.Fprintln(w, "no steps run")
		return
	}
	first, last := h.Steps[0], h.Steps[len(h.Steps)-1]
	fmt.Fprintf(w, "\n%-22s %s\n", "steps", fmt.Sprintf("%d to %d", first.Step, last.Step))
	fmt.Fprintf(w, "%-22s %.4f -> %.4f\n", "loss", first.Loss, last.Loss)
	if n := len(h.Eval); n > 0 {
		fmt.Fprintf(w, "%-22s %.4f -> %.4f (steps %d to %d, %s)\n", "eval loss", h.Eval[0].Loss, h.Eval[n-1].Loss,
			h.Eval[0].Step, h.Eval[n-1].Step, perSecond(h.Eval[n-1].Count, cmp.Or(h.CountUnit, "examples")))
	}
	for name, v := range first.Metrics {
		fmt.Fprintf(w, "%-22s %.3f -> %.3f\n", name, v, last.Metrics[name])
	}
	fmt.Fprintf(w, "%-22s %.1f s\n", "first step", h.CompileSeconds)
	if h.StepSeconds > 0 {
		fmt.Fprintf(w, "%-22s %.3f s (%s/s)\n", "later steps, mean", h.StepSeconds, perSecond(h.TokensPerSecond, cmp.Or(h.CountUnit, "examples")))
	}
	if h.Offload != nil {
		h.Offload.WriteSummary(w)
	}
}

// perSecond writes a rate of unit per second, e.g. "12.3k tokens".
func perSecond(rate float64, unit string) string {
	switch {
	case rate >= 1e6:
		return fmt.Sprintf("%.2fM %s", rate/1e6, unit)
	case rate >= 1e3:
		return fmt.Sprintf("%.1fk %s", rate/1e3, unit)
	}
	return fmt.Sprintf("%.0f %s", rate, unit)
}
