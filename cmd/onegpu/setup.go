package main

import (
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/gomlx/gomlx/backends"

	"github.com/onegpu/onegpu/flags"
	ograph "github.com/onegpu/onegpu/graph"
	"github.com/onegpu/onegpu/mixed"
	"github.com/onegpu/onegpu/models"
	"github.com/onegpu/onegpu/plan"
	"github.com/onegpu/onegpu/remat"
	"github.com/onegpu/onegpu/train"
)

// setup holds the flags that choose a model, the techniques applied to it and the backend; the
// train, memory, bench and plan commands share them. A flag left out gives the model's default,
// which follows the tutorial: for the GPT bfloat16 compute, remat of MLP and attention and the
// preset's micro-batches; for the MLP float32 and one micro-batch. A flag given is always
// checked: 0 micro-batches is an error, not the default.
type setup struct {
	model, preset, policy, remat, rematPolicy, lossScale, backend string
	batch, microBatches                                           int
	learningRate, dropout                                         float64
	devices                                                       int
	shard, optimizer, offload                                     string
	seed                                                          uint64
	xlaPresets                                                    presetFlags
	fs                                                            *flag.FlagSet
}

func (s *setup) register(fs *flag.FlagSet, defaultModel, defaultPreset string) {
	s.fs = fs
	fs.StringVar(&s.model, "model", defaultModel, "model: gpt (the tutorial's transformer) or mlp (the tutorial's classifier)")
	fs.StringVar(&s.preset, "preset", defaultPreset, "GPT size (gpt only): "+fmt.Sprint(models.PresetNames()))
	fs.StringVar(&s.policy, "policy", "", `precision policy, jmp's grammar: "params=float32,compute=bfloat16,output=float32", "bf16", ... (default: bf16 compute for gpt, float32 for mlp)`)
	fs.StringVar(&s.remat, "remat", "", "blocks to rematerialize: none, mlp, attn, mlp,attn or block (default: mlp,attn for gpt)")
	fs.StringVar(&s.rematPolicy, "remat-policy", "", "what rematerialized blocks save (with --remat other than none): nothing_saveable (default), dots_saveable, dots_with_no_batch_dims_saveable, save_only_these_names:a,b ...")
	fs.IntVar(&s.batch, "batch", 0, "batch size, at least 1 (default: the preset's, 512 for mlp)")
	fs.IntVar(&s.microBatches, "microbatches", 0, "micro-batches per batch, accumulated in one step; at least 1 and dividing the batch (default: the preset's, 1 for mlp)")
	fs.Float64Var(&s.dropout, "dropout", 0, "dropout rate while training, in [0, 1); 0 makes runs with different micro-batches comparable (default: the model's, 0.1 for the GPT presets and the MLP)")
	fs.StringVar(&s.lossScale, "loss-scale", "none", "loss scaling: none, dynamic or static=N")
	fs.StringVar(&s.optimizer, "optimizer", "adam", "optimizer: adam, or adam8bit (Adam with block-wise 8-bit moments: a quarter of the state)")
	fs.StringVar(&s.offload, "offload", "none", "offload: none, or optimizer (the optimizer's state and update live in host memory, on the embedded backend; the device computes loss and gradients)")
	fs.Uint64Var(&s.seed, "seed", 42, "seed of the initial weights, dropout and data")
	fs.Float64Var(&s.learningRate, "lr", 0, "peak learning rate of the warm-up/exponential-decay schedule, positive (default: the preset's; 1e-3 for mlp)")
	fs.StringVar(&s.backend, "backend", "", `backend: "go" (embedded, default) or "xla:/abs/path/plugin.so"; default from $GOMLX_BACKEND or $ONEGPU_PJRT_PLUGIN`)
	fs.Var(&s.xlaPresets, "xla-preset", "XLA_FLAGS preset for an XLA backend only (repeatable; see onegpu flags -h) (default: none)")
	fs.IntVar(&s.devices, "devices", 1, "devices of the XLA backend to split each batch across (data parallel, XLA's SPMD partitioner)")
	fs.StringVar(&s.shard, "shard", "none", "with --devices N: what is split across devices instead of copied: none, optimizer (ZeRO-1) or params (params, gradients and optimizer state: FSDP)")
}

// parseSetup reads a configuration written with the setup flags alone (train's defaults: the
// tiny GPT), as `compare --config` takes them.
func parseSetup(name string, args []string) (*setup, error) {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	s := &setup{}
	s.register(fs, "gpt", "tiny")
	return s, parseArgs(fs, args)
}

// given returns the setup flags the command line set.
func (s *setup) given() map[string]bool {
	if s.fs == nil {
		return map[string]bool{}
	}
	return given(s.fs)
}

// config turns the flags into a validated training config. A flag that was given is checked
// even where its value is the one that means "default" when the flag is left out.
func (s *setup) config() (train.Config, error) {
	set := s.given()
	var c train.Config
	for _, f := range []struct {
		name       string
		value, min int
	}{{"batch", s.batch, 1}, {"microbatches", s.microBatches, 1}} {
		if err := atLeast(set, f.name, f.value, f.min); err != nil {
			return c, err
		}
	}
	if set["lr"] && !(s.learningRate > 0) {
		return c, fmt.Errorf("--lr %g: the peak learning rate must be positive", s.learningRate)
	}
	if set["dropout"] && !(s.dropout >= 0 && s.dropout < 1) {
		return c, fmt.Errorf("--dropout %g: the dropout rate must be in [0, 1)", s.dropout)
	}
	if s.model == "mlp" {
		if err := notApplicable(set, "the GPT presets do not size the MLP (drop it, or use --model gpt)", "preset"); err != nil {
			return c, err
		}
	}
	c, err := plan.Defaults(s.model, s.preset)
	if err != nil {
		if s.model != "gpt" && s.model != "mlp" {
			return c, fmt.Errorf("unknown --model %q: the models are gpt and mlp", s.model)
		}
		return c, err
	}
	c.LossScale, c.Seed, c.Optimizer, c.Offload = s.lossScale, s.seed, s.optimizer, s.offload
	policy, rematSpec := c.Policy.String(), c.Remat.String()
	if s.policy != "" {
		policy = s.policy
	}
	if s.remat != "" {
		rematSpec = s.remat
	}
	if c.Policy, err = mixed.ParsePolicy(policy); err != nil {
		return c, fmt.Errorf("--policy: %w", err)
	}
	if c.Remat, err = remat.ParseSpec(rematSpec); err != nil {
		return c, fmt.Errorf("--remat: %w", err)
	}
	if s.model == "mlp" && !c.Remat.None() {
		return c, fmt.Errorf("--remat %s: the MLP has no blocks to rematerialize; use --model gpt", rematSpec)
	}
	if set["remat-policy"] {
		if c.Remat.None() {
			return c, fmt.Errorf("--remat-policy %s does not apply: nothing is rematerialized (remat %s)", s.rematPolicy, rematSpec)
		}
		if c.RematPolicy, err = remat.ParsePolicy(s.rematPolicy); err != nil {
			return c, fmt.Errorf("--remat-policy: %w", err)
		}
	}
	if set["lr"] {
		c.Schedule.Peak = s.learningRate
		if s.model == "mlp" {
			c.Schedule.Init = s.learningRate
		}
	}
	if set["batch"] {
		c.Batch = s.batch
		c.GPT.Batch = s.batch
	}
	if set["microbatches"] {
		c.MicroBatches = s.microBatches
		c.GPT.MicroBatch = s.microBatches
	}
	if set["dropout"] {
		c.GPT.Dropout, c.Classifier.Dropout = s.dropout, s.dropout
	}
	if c.Devices, err = s.parseDevices(); err != nil {
		return c, err
	}
	if err := c.Validate(); err != nil {
		return c, err
	}
	if err := plan.CheckUnrolled(c); err != nil { // before anything builds the step
		return c, fmt.Errorf("--microbatches: %w", err)
	}
	return c, nil
}

// newBackend creates the chosen backend with the XLA presets.
func (s *setup) newBackend() (backends.Backend, ograph.BackendSpec, error) {
	spec, err := ograph.ResolveBackend(s.backend)
	if err != nil {
		return nil, spec, err
	}
	if len(s.xlaPresets) > 0 && spec.Kind != "xla" {
		return nil, spec, fmt.Errorf("--xla-preset %s does not apply: the backend is %s (from %s), which has no XLA; "+
			"use --backend xla:/abs/path/plugin.so, or drop it", s.xlaPresets.String(), spec, spec.Source)
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
	devices := ""
	if c.Devices.Distributed() {
		devices = fmt.Sprintf(", on %d devices (batch split, shard %s)", c.Devices.Count, c.Devices.Shard)
	}
	if c.Model == "mlp" {
		return fmt.Sprintf("tutorial MLP (128 -> 256 -> 100), batch %d in %s, policy %s%s", c.Batch, plural(c.MicroBatches, "micro-batch"), c.Policy, devices)
	}
	return fmt.Sprintf("GPT %d layers × hidden %d (%s params), batch %d×%d tokens in %s, policy %s, remat %s%s",
		c.GPT.Layers, c.GPT.Hidden, groupDigits(c.GPT.Params()), c.Batch, c.GPT.SeqLen, plural(c.MicroBatches, "micro-batch"), c.Policy, c.Remat, devices)
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

// parseDevices reads --devices and --shard.
func (s *setup) parseDevices() (train.Devices, error) {
	shard, err := train.ParseShard(s.shard)
	if err != nil {
		return train.Devices{}, fmt.Errorf("--shard: %w", err)
	}
	if s.devices < 1 {
		return train.Devices{}, fmt.Errorf("--devices %d: use at least 1 device", s.devices)
	}
	return train.Devices{Count: s.devices, Shard: shard}, nil
}
