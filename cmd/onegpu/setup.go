package main

import (
	"flag"
	"fmt"
	"strings"

	"github.com/gomlx/gomlx/backends"

	"github.com/onegpu/onegpu/flags"
	ograph "github.com/onegpu/onegpu/graph"
	"github.com/onegpu/onegpu/mixed"
	"github.com/onegpu/onegpu/models"
	"github.com/onegpu/onegpu/remat"
	"github.com/onegpu/onegpu/train"
)

// setup holds the flags that choose a model, the techniques applied to it and the backend; the
// train, memory, bench and plan commands share them. Empty values mean the model's default, which
// follows the tutorial: for the GPT bfloat16 compute, remat of MLP and attention and the preset's
// micro-batches; for the MLP float32 and one micro-batch.
type setup struct {
	model, preset, policy, remat, rematPolicy, lossScale, backend string
	batch, microBatches                                           int
	learningRate                                                  float64
	seed                                                          uint64
	xlaPresets                                                    presetFlags
}

func (s *setup) register(fs *flag.FlagSet, defaultModel, defaultPreset string) {
	fs.StringVar(&s.model, "model", defaultModel, "model: gpt (the tutorial's transformer) or mlp (the tutorial's classifier)")
	fs.StringVar(&s.preset, "preset", defaultPreset, "GPT size: "+fmt.Sprint(models.PresetNames()))
	fs.StringVar(&s.policy, "policy", "", `precision policy, jmp's grammar: "params=float32,compute=bfloat16,output=float32", "bf16", ... (default: bf16 compute for gpt, float32 for mlp)`)
	fs.StringVar(&s.remat, "remat", "", "blocks to rematerialize: none, mlp, attn, mlp,attn or block (default: mlp,attn for gpt)")
	fs.StringVar(&s.rematPolicy, "remat-policy", "", "what rematerialized blocks save: nothing_saveable (default), dots_saveable, dots_with_no_batch_dims_saveable, save_only_these_names:a,b ...")
	fs.IntVar(&s.batch, "batch", 0, "batch size (default: the preset's, 512 for mlp)")
	fs.IntVar(&s.microBatches, "microbatches", 0, "micro-batches per batch, accumulated in one step (default: the preset's, 1 for mlp)")
	fs.StringVar(&s.lossScale, "loss-scale", "none", "loss scaling: none, dynamic or static=N")
	fs.Uint64Var(&s.seed, "seed", 42, "seed of the initial weights, dropout and data")
	fs.Float64Var(&s.learningRate, "lr", 0, "peak learning rate of the warm-up/exponential-decay schedule (default: the preset's; 1e-3 for mlp)")
	fs.StringVar(&s.backend, "backend", "", `backend: "go" (embedded, default) or "xla:/abs/path/plugin.so"; default from $GOMLX_BACKEND or $ONEGPU_PJRT_PLUGIN`)
	fs.Var(&s.xlaPresets, "xla-preset", "XLA_FLAGS preset for an XLA backend (repeatable; see onegpu flags -h)")
}

// config turns the flags into a validated training config.
func (s *setup) config() (train.Config, error) {
	c := train.Config{Model: s.model, LossScale: s.lossScale, Schedule: train.TutorialSchedule, Seed: s.seed}
	policy, rematSpec := "float32", "none"
	switch s.model {
	case "gpt":
		preset, err := models.Preset(s.preset)
		if err != nil {
			return c, err
		}
		c.GPT, c.Batch, c.MicroBatches = preset, preset.Batch, preset.MicroBatch
		c.Schedule.Peak = preset.LearningRate
		policy, rematSpec = "params=float32,compute=bfloat16,output=float32", "mlp,attn"
	case "mlp":
		c.Classifier, c.Batch, c.MicroBatches = models.TutorialClassifier, models.TutorialClassifier.Batch, 1
		c.Schedule = train.Schedule{Init: 1e-3, Peak: 1e-3, WarmupSteps: 0, TransitionSteps: 1, DecayRate: 1} // Part 1.1: Adam at 1e-3
	default:
		return c, fmt.Errorf("unknown --model %q: the models are gpt and mlp", s.model)
	}
	if s.policy != "" {
		policy = s.policy
	}
	if s.remat != "" {
		rematSpec = s.remat
	}
	var err error
	if c.Policy, err = mixed.ParsePolicy(policy); err != nil {
		return c, fmt.Errorf("--policy: %w", err)
	}
	if c.Remat, err = remat.ParseSpec(rematSpec); err != nil {
		return c, fmt.Errorf("--remat: %w", err)
	}
	if s.model == "mlp" && !c.Remat.None() {
		return c, fmt.Errorf("--remat %s: the MLP has no blocks to rematerialize; use --model gpt", rematSpec)
	}
	if s.rematPolicy != "" {
		if c.RematPolicy, err = remat.ParsePolicy(s.rematPolicy); err != nil {
			return c, fmt.Errorf("--remat-policy: %w", err)
		}
	}
	if s.learningRate != 0 {
		c.Schedule.Peak = s.learningRate
		if s.model == "mlp" {
			c.Schedule.Init = s.learningRate
		}
	}
	if s.batch != 0 {
		c.Batch = s.batch
		c.GPT.Batch = s.batch
	}
	if s.microBatches != 0 {
		c.MicroBatches = s.microBatches
		c.GPT.MicroBatch = s.microBatches
	}
	return c, c.Validate()
}

// newBackend creates the chosen backend with the XLA presets.
func (s *setup) newBackend() (backends.Backend, ograph.BackendSpec, error) {
	spec, err := ograph.ResolveBackend(s.backend)
	if err != nil {
		return nil, spec, err
	}
	b, err := ograph.NewBackendWithOptions(spec, ograph.XLAOptions{Presets: []flags.Preset(s.xlaPresets)})
	return b, spec, err
}

// title is a short description of a config, for plots.
func title(c train.Config) string {
	if c.Model == "mlp" {
		return fmt.Sprintf("MLP, %s", c.Policy)
	}
	return fmt.Sprintf("GPT %d×%d, compute %s, remat %s, %d micro-batches", c.GPT.Layers, c.GPT.Hidden,
		c.Policy.Compute, c.Remat, c.MicroBatches)
}

// modelTitle names a config's model without its techniques, for plots of several techniques.
func modelTitle(c train.Config) string {
	if c.Model == "mlp" {
		return "tutorial MLP"
	}
	return fmt.Sprintf("GPT %d layers × hidden %d, batch %d×%d", c.GPT.Layers, c.GPT.Hidden, c.Batch, c.GPT.SeqLen)
}

// describe is a one-line description of a config.
func describe(c train.Config) string {
	if c.Model == "mlp" {
		return fmt.Sprintf("tutorial MLP (128 -> 256 -> 100), batch %d in %s, policy %s", c.Batch, plural(c.MicroBatches, "micro-batch"), c.Policy)
	}
	return fmt.Sprintf("GPT %d layers × hidden %d (%s params), batch %d×%d tokens in %s, policy %s, remat %s",
		c.GPT.Layers, c.GPT.Hidden, groupDigits(c.GPT.Params()), c.Batch, c.GPT.SeqLen, plural(c.MicroBatches, "micro-batch"), c.Policy, c.Remat)
}

// plural writes "1 micro-batch" or "4 micro-batches".
func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	if strings.HasSuffix(noun, "ch") {
		return fmt.Sprintf("%d %ses", n, noun)
	}
	return fmt.Sprintf("%d %ss", n, noun)
}
