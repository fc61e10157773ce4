package train

import (
	"cmp"
	"fmt"
	"runtime/debug"

	"github.com/onegpu/onegpu/models"
	"github.com/onegpu/onegpu/train/checkpoint"
)

// OpenCheckpoints opens the checkpoint folder dir for a run of config (checkpoint.Open with
// Record(config)): see checkpoint.Open for what it checks and refuses.
func OpenCheckpoints(dir string, config Config, keep int) (*checkpoint.Folder, error) {
	return checkpoint.Open(dir, Record(config), keep)
}

// Record returns what a checkpoint written by a trainer with config c records.
func Record(c Config) checkpoint.WrittenBy {
	scale := c.LossScale
	if scale == "" {
		scale = "none"
	}
	r := checkpoint.WrittenBy{
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
