package train

import (
	"cmp"
	"fmt"
	"runtime/debug"
	"strings"

	"github.com/onegpu/onegpu/models"
)

// WrittenBy is what a checkpoint records about the run that wrote it. Resuming compares it with
// the requested config before anything is built, so a checkpoint is never loaded into a model it
// does not fit, nor continued under settings that change what its numbers mean.
//
// Settings that must match on resume: the model and its sizes, the vocabulary, the precision
// policy, the optimizer and loss scale, the batch size, the seed (it chooses the data and the
// dropout masks) and the schedule's shape. Settings that may change on resume, because they change
// how a step is computed or how long the run is, not what the weights mean: the number of steps,
// the micro-batches, the learning rate's initial and peak values, remat and its policy, the backend. The onegpu version
// is recorded for the record only.
type WrittenBy struct {
	Onegpu     string `json:"onegpu"`
	Model      string `json:"model"` // e.g. "GPT small (4 layers × 256, 4 heads of 64, sequence 128, MLP ×4)"
	Vocabulary int    `json:"vocabulary"`
	Policy     string `json:"policy"`
	Optimizer  string `json:"optimizer"`
	Batch      int    `json:"batch"`
	Seed       uint64 `json:"seed"`
	Schedule   string `json:"schedule"` // without the initial and peak rates, which may change
	Dropout    string `json:"dropout"`
	// May change on resume; recorded to say what the checkpoint was trained with.
	MicroBatches int     `json:"microbatches"`
	PeakLR       float64 `json:"peak_lr"`
	Remat        string  `json:"remat"`
}

// Record returns what a checkpoint written by a trainer with config c records.
func Record(c Config) WrittenBy {
	scale := c.LossScale
	if scale == "" {
		scale = "none"
	}
	r := WrittenBy{
		Onegpu: Version(), Policy: c.Policy.String(),
		Optimizer: fmt.Sprintf("%s(b1=%g, b2=%g, eps=%g), loss scale %s", cmp.Or(c.Optimizer, OptimizerAdam), AdamBeta1, AdamBeta2, AdamEpsilon, scale),
		Batch:     c.Batch, Seed: c.Seed, MicroBatches: c.MicroBatches, PeakLR: c.Schedule.Peak,
		Schedule: fmt.Sprintf("warm-up %d steps, decay ×%g every %d", c.Schedule.WarmupSteps,
			c.Schedule.DecayRate, c.Schedule.TransitionSteps),
		Remat: c.Remat.String(),
	}
	if !c.Remat.None() {
		r.Remat += " (" + c.RematPolicy.String() + ")"
	}
	switch c.Model {
	case "gpt":
		r.Model, r.Vocabulary, r.Dropout = describeGPT(c.GPT), c.GPT.Vocab, fmt.Sprint(c.GPT.Dropout)
	case "mlp":
		k := c.Classifier
		r.Model, r.Vocabulary = fmt.Sprintf("MLP (%d -> %d -> %d)", k.Inputs, k.Hidden, k.Classes), k.Classes
		r.Dropout = fmt.Sprint(k.Dropout)
	default:
		r.Model = c.Model
	}
	return r
}

// describeGPT names a GPT's sizes, and its preset when it is one.
func describeGPT(g models.GPTConfig) string {
	name := "GPT"
	for _, preset := range models.PresetNames() {
		p := models.Presets[preset]
		if p.Hidden == g.Hidden && p.Layers == g.Layers && p.HeadDim == g.HeadDim && p.MLPFactor == g.MLPFactor && p.SeqLen == g.SeqLen {
			name += " " + preset
		}
	}
	heads := 0
	if g.HeadDim > 0 {
		heads = g.Hidden / g.HeadDim
	}
	return fmt.Sprintf("%s (%d layers × %d, %d heads of %d, sequence %d, MLP ×%d)", name, g.Layers, g.Hidden, heads,
		g.HeadDim, g.SeqLen, g.MLPFactor)
}

// Differences lists each setting that must match on resume but does not, as "setting: this
// checkpoint was written by X; you asked for Y". Settings that may change are not listed.
func (w WrittenBy) Differences(asked WrittenBy) []string {
	var diffs []string
	add := func(name string, written, wanted any) {
		if fmt.Sprint(written) != fmt.Sprint(wanted) {
			diffs = append(diffs, fmt.Sprintf("%s: this checkpoint was written by %v; you asked for %v", name, written, wanted))
		}
	}
	add("model", w.Model, asked.Model)
	add("vocabulary", w.Vocabulary, asked.Vocabulary)
	add("policy", w.Policy, asked.Policy)
	add("optimizer", w.Optimizer, asked.Optimizer)
	add("batch", w.Batch, asked.Batch)
	add("seed", w.Seed, asked.Seed)
	add("schedule", w.Schedule, asked.Schedule)
	add("dropout", w.Dropout, asked.Dropout)
	return diffs
}

// ConfigMismatchError is returned when a checkpoint folder holds a run of another config.
type ConfigMismatchError struct {
	Dir         string
	Differences []string
}

func (e *ConfigMismatchError) Error() string {
	return fmt.Sprintf("checkpoint folder %s holds another run; nothing was loaded or deleted:\n  %s\n"+
		"use another --checkpoint folder, or the settings it was written with (steps, micro-batches, --lr, remat and backend may change on resume)",
		e.Dir, strings.Join(e.Differences, "\n  "))
}

// Version is the onegpu module's version and VCS revision as the Go toolchain recorded them
// ("(devel)" for a build from a work tree).
func Version() string {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown"
	}
	v := info.Main.Version
	for _, s := range info.Settings {
		if s.Key == "vcs.revision" && len(s.Value) >= 12 {
			v += " " + s.Value[:12]
		}
	}
	return v
}
