package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/gomlx/gomlx/backends"

	"github.com/onegpu/onegpu/data"
	"github.com/onegpu/onegpu/flags"
	"github.com/onegpu/onegpu/mixed"
	"github.com/onegpu/onegpu/models"
	"github.com/onegpu/onegpu/optim"
	"github.com/onegpu/onegpu/platform"
	"github.com/onegpu/onegpu/recipes"
	"github.com/onegpu/onegpu/remat"
	"github.com/onegpu/onegpu/train"
)

// setup holds the flags that choose a model, the techniques applied to it and the backend; the
// train, memory, bench and plan commands share them. They are the CLI's strings: config reads them
// into the typed run description (train.Config), starting from the model's default run
// (recipes.Defaults), which follows the tutorial: for the GPT bfloat16 compute, remat of MLP and
// attention and the preset's micro-batches; for the MLP float32 and one micro-batch. A flag given
// is always checked: 0 micro-batches is an error, not the default.
type setup struct {
	model, preset, policy, remat, rematPolicy, lossScale, backend string
	batch, microBatches                                           int
	learningRate, dropout, weightDecay, clipNorm                  float64
	devices                                                       int
	shard, optimizer, offload, hostUpdate                         string
	attention, crossEntropy, mlp                                  string
	seq                                                           int
	seed                                                          uint64
	xlaPresets                                                    presetFlags
	lora                                                          loraFlags
	fs                                                            *flag.FlagSet
	// base, when set, is the run the flags apply to instead of the model's preset's (train
	// --init-hf: the shape of a checkpoint's config.json).
	base func() (train.Config, error)
}

func (s *setup) register(fs *flag.FlagSet, defaultModel, defaultPreset string) {
	s.fs = fs
	fs.StringVar(&s.model, "model", defaultModel, "model: "+modelChoices())
	fs.StringVar(&s.preset, "preset", defaultPreset, "model size, for a model with presets: "+presetChoices())
	fs.StringVar(&s.policy, "policy", "", `precision policy, jmp's grammar: "params=float32,compute=bfloat16,output=float32", "bf16", ... (default: bf16 compute for gpt, float32 for mlp)`)
	fs.StringVar(&s.remat, "remat", "", "kinds of block to rematerialize: none, or the model's kinds, e.g. mlp, attn, mlp,attn or block for gpt (default: mlp,attn for gpt)")
	fs.StringVar(&s.rematPolicy, "remat-policy", "", "what rematerialized blocks save (with --remat other than none): nothing_saveable (default), dots_saveable, dots_with_no_batch_dims_saveable, save_only_these_names:a,b ...")
	fs.IntVar(&s.batch, "batch", 0, "batch size, at least 1 (default: the preset's, 512 for mlp)")
	fs.IntVar(&s.microBatches, "microbatches", 0, "micro-batches per batch, accumulated in one step; at least 1 and dividing the batch (default: the preset's, 1 for mlp)")
	fs.Float64Var(&s.dropout, "dropout", 0, "dropout rate while training, in [0, 1); 0 makes runs with different micro-batches comparable (default: the model's, 0.1 for the GPT presets and the MLP)")
	fs.StringVar(&s.lossScale, "loss-scale", "none", "loss scaling: none, dynamic or static=N")
	fs.StringVar(&s.optimizer, "optimizer", "adam", "optimizer: "+strings.Join(optim.Names(), ", ")+" (adam8bit: Adam with block-wise 8-bit moments, a quarter of the state)")
	fs.Float64Var(&s.weightDecay, "weight-decay", 0, "decoupled weight decay of adamw, at least 0 (default: optax's 1e-4)")
	fs.Float64Var(&s.clipNorm, "clip-norm", 0, "clip the gradients to this global L2 norm, positive (default: no clipping)")
	fs.StringVar(&s.offload, "offload", "none", "offload: none, optimizer (the optimizer's state and update live in host memory, on the embedded backend; the device computes loss and gradients)\n"+
		"or params (the float32 master weights, gradients and optimizer state live in host memory; the model streams through the device a block at a time: gpt and llama)\n"+
		"or staged (nothing offloaded: the step runs a stage at a time on the device, one program per kind of stage, so compile time does not grow with depth: gpt and llama)")
	fs.StringVar(&s.hostUpdate, "host-update", "overlap", "with --offload params: when the host updates a stage, overlap (as soon as its gradients are on the host, while the device\n"+
		"computes the next stage's backward pass; the same weights bit for bit) or serial (every stage after the backward pass, to compare)")
	fs.Uint64Var(&s.seed, "seed", 42, "seed of the initial weights, dropout and data")
	fs.Float64Var(&s.learningRate, "lr", 0, "peak learning rate of the model's schedule (the tutorial's warm-up/exponential decay; constant for mlp), positive (default: the preset's; 1e-3 for mlp)")
	fs.StringVar(&s.backend, "backend", "", `backend: "go" (embedded, default) or "xla:/abs/path/plugin.so"; default from $GOMLX_BACKEND or $ONEGPU_PJRT_PLUGIN`)
	fs.Var(&s.xlaPresets, "xla-preset", "XLA_FLAGS preset for an XLA backend only (repeatable; see onegpu flags -h) (default: none)")
	fs.IntVar(&s.devices, "devices", 1, "devices of the XLA backend to split each batch across (data parallel, XLA's SPMD partitioner)")
	s.lora.register(fs)
	fs.StringVar(&s.shard, "shard", "none", "with --devices N: what is split across devices instead of copied: none, optimizer (ZeRO-1) or params (params, gradients and optimizer state: FSDP)")
	s.registerChunking(fs)
}

// modelChoices lists the models --model takes, with what each is.
func modelChoices() string {
	var parts []string
	for _, name := range recipes.Names() {
		f, _ := recipes.Lookup(name)
		parts = append(parts, fmt.Sprintf("%s (%s)", name, f.Summary))
	}
	return strings.Join(parts, ", ")
}

// presetChoices lists each model's presets.
func presetChoices() string {
	var parts []string
	for _, name := range recipes.Names() {
		if f, _ := recipes.Lookup(name); len(f.Presets) > 0 {
			parts = append(parts, fmt.Sprintf("%s: %s", name, strings.Join(f.Presets, ", ")))
		}
	}
	return strings.Join(parts, "; ")
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

// config reads the flags into a validated run description: the model's default run
// (recipes.Defaults) with the flags given applied. A flag that was given is checked even where its
// value is the one that means "default" when the flag is left out.
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
	family, err := recipes.Lookup(s.model)
	if err != nil {
		return c, fmt.Errorf("unknown --model %q: the models are %s", s.model, strings.Join(recipes.Names(), ", "))
	}
	preset := s.preset
	if len(family.Presets) == 0 {
		if err := notApplicable(set, fmt.Sprintf("the %s has one size, without presets (drop it, or use --model gpt)", s.model), "preset"); err != nil {
			return c, err
		}
		preset = ""
	}
	if s.base != nil {
		c, err = s.base()
	} else {
		c, err = family.Run(preset)
	}
	if err != nil {
		return c, err
	}
	if err := s.applyChunking(&c, family, set); err != nil {
		return c, err
	}
	if set["dropout"] {
		if family.WithDropout == nil {
			return c, fmt.Errorf("--dropout does not apply: the %s has no dropout", s.model)
		}
		c.Model = family.WithDropout(c.Model, s.dropout)
	}
	c.Seed = s.seed
	if c.LossScale, err = mixed.ParseLossScale(s.lossScale); err != nil {
		return c, fmt.Errorf("--loss-scale: %w", err)
	}
	if set["weight-decay"] && !(s.weightDecay >= 0) {
		return c, fmt.Errorf("--weight-decay %g: the weight decay must be at least 0", s.weightDecay)
	}
	if c.Optimizer, err = optim.ByName(s.optimizer, optim.Settings{WeightDecay: s.weightDecay}); err != nil {
		return c, fmt.Errorf("--optimizer: %w", err)
	}
	if set["clip-norm"] && !(s.clipNorm > 0) {
		return c, fmt.Errorf("--clip-norm %g: clip to a positive global norm, or leave the flag out", s.clipNorm)
	}
	c.ClipNorm = s.clipNorm
	if c.Offload, err = train.ParseOffload(s.offload); err != nil {
		return c, err
	}
	switch {
	case set["host-update"] && c.Offload != train.OffloadParams:
		return c, fmt.Errorf("--host-update %s does not apply: the host updates stages with --offload params only", s.hostUpdate)
	case s.hostUpdate == "serial":
		c.SerialHostUpdate = true
	case s.hostUpdate != "overlap":
		return c, fmt.Errorf("--host-update %q: use overlap or serial", s.hostUpdate)
	}
	if s.policy != "" {
		if c.Policy, err = mixed.ParsePolicy(s.policy); err != nil {
			return c, fmt.Errorf("--policy: %w", err)
		}
	}
	if s.remat != "" {
		if c.Remat.Kinds, err = remat.ParseKinds(s.remat); err != nil {
			return c, fmt.Errorf("--remat: %w", err)
		}
	}
	if set["remat-policy"] {
		if c.Remat.None() {
			return c, fmt.Errorf("--remat-policy %s does not apply: nothing is rematerialized (remat %s)", s.rematPolicy, c.Remat)
		}
		if c.Remat.Policy, err = remat.ParsePolicy(s.rematPolicy); err != nil {
			return c, fmt.Errorf("--remat-policy: %w", err)
		}
	}
	if set["lr"] {
		if c.Schedule, err = withPeak(c.Schedule, s.learningRate); err != nil {
			return c, err
		}
	}
	if set["batch"] {
		c.Batch = s.batch
	}
	if set["microbatches"] {
		c.MicroBatches = s.microBatches
	}
	if c.Devices, err = s.parseDevices(); err != nil {
		return c, err
	}
	if err := s.lora.apply(&c, set); err != nil {
		return c, err
	}
	if err := c.Validate(); err != nil {
		var unrolled *train.UnrolledError
		if errors.As(err, &unrolled) && unrolled.Most == 0 {
			return c, fmt.Errorf("%d layers: even one micro-batch unrolls more than the %d blocks onegpu builds (GoMLX v0.26 has no loops): "+
				"run the model streamed, one layer at a time, with --offload params", unrolled.Layers, train.MaxUnrolledBlocks)
		}
		if errors.As(err, &unrolled) {
			return c, fmt.Errorf("--microbatches: %w", err)
		}
		return c, err
	}
	return c, nil
}

// withPeak returns schedule s with peak learning rate lr (--lr): a constant's rate, the warm-up's
// target.
func withPeak(s optim.Schedule, lr float64) (optim.Schedule, error) {
	switch s := s.(type) {
	case optim.ConstantSchedule:
		return optim.Constant(lr), nil
	case optim.WarmupExponentialDecaySchedule:
		s.Peak = lr
		return s, nil
	case optim.WarmupCosineSchedule:
		s.Peak = lr
		return s, nil
	}
	return s, fmt.Errorf("--lr does not apply: the model's schedule %s has no peak to set", s)
}

// newBackend creates the chosen backend with the XLA presets.
func (s *setup) newBackend() (backends.Backend, platform.BackendSpec, error) {
	spec, err := platform.ResolveBackend(s.backend)
	if err != nil {
		return nil, spec, err
	}
	if len(s.xlaPresets) > 0 && spec.Kind != "xla" {
		return nil, spec, fmt.Errorf("--xla-preset %s does not apply: the backend is %s (from %s), which has no XLA; "+
			"use --backend xla:/abs/path/plugin.so, or drop it", s.xlaPresets.String(), spec, spec.Source)
	}
	b, err := platform.NewBackendWithOptions(spec, platform.XLAOptions{Presets: []flags.Preset(s.xlaPresets)})
	return b, spec, err
}

// title is a short description of a config, for plots.
func title(c train.Config) string {
	if g, ok := c.Model.(models.GPT); ok {
		return fmt.Sprintf("GPT %d×%d, compute %s, remat %s, %d micro-batches%s", g.Config.Layers, g.Config.Hidden,
			c.Policy.Compute, c.Remat, c.MicroBatches, chunkingNote(c))
	}
	if _, ok := c.Model.(train.LanguageModel); ok { // a Llama: its description, then the techniques
		return fmt.Sprintf("%s, batch %d, compute %s, remat %s, %s%s", modelTitle(c), c.Batch, c.Policy.Compute, c.Remat,
			plural(c.MicroBatches, "micro-batch"), chunkingNote(c))
	}
	return fmt.Sprintf("%s, %s", modelTitle(c), c.Policy)
}

// modelTitle names a config's model without its techniques, for plots of several techniques.
func modelTitle(c train.Config) string {
	switch m := c.Model.(type) {
	case models.Classifier:
		return "tutorial MLP"
	case models.GPT:
		return fmt.Sprintf("GPT %d layers × hidden %d, batch %d×%d", m.Config.Layers, m.Config.Hidden, c.Batch, m.Config.SeqLen)
	}
	return fmt.Sprint(c.Model)
}

// describe is a one-line description of a config.
func describe(c train.Config) string {
	devices := ""
	if c.Devices.Distributed() {
		devices = fmt.Sprintf(", on %d devices (batch split, shard %s)", c.Devices.Count, c.Devices.Shard)
	}
	switch m := c.Model.(type) {
	case models.Classifier:
		k := m.Config
		return fmt.Sprintf("tutorial MLP (%d -> %d -> %d), batch %d in %s, policy %s%s", k.Inputs, k.Hidden, k.Classes, c.Batch,
			plural(c.MicroBatches, "micro-batch"), c.Policy, devices)
	case models.GPT:
		g := m.Config
		return fmt.Sprintf("GPT %d layers × hidden %d (%s params), batch %d×%d tokens in %s, policy %s, remat %s%s%s",
			g.Layers, g.Hidden, groupDigits(g.Params()), c.Batch, g.SeqLen, plural(c.MicroBatches, "micro-batch"), c.Policy, c.Remat, chunkingNote(c), devices)
	}
	adapters := ""
	if a := c.DescribeAdapters(); a != "" {
		adapters = ", " + a
	}
	return fmt.Sprintf("%v, batch %d in %s, policy %s, remat %s%s%s%s", c.Model, c.Batch, plural(c.MicroBatches, "micro-batch"), c.Policy, c.Remat,
		chunkingNote(c), adapters, devices)
}

// batchData returns the data a config trains on: for a language model (train.LanguageModel) the
// shipped text or the tutorial's synthetic tokens, as name says; for the MLP its classification
// batch.
func batchData(c train.Config, name string) (data.Data, error) {
	switch m := c.Model.(type) {
	case models.Classifier:
		return data.NewClassifierBatch(c.Batch, m.Config.Inputs, m.Config.Classes, c.Seed)
	case train.LanguageModel:
		seqLen, vocab := m.TokenShape()
		if strings.HasSuffix(name, ".npy") {
			return data.ReadTokens(name, c.Batch, seqLen, vocab, c.Seed)
		}
		switch name {
		case "text":
			if vocab < 256 {
				return nil, fmt.Errorf("--data text needs a vocabulary of at least 256 bytes; the model has %d", vocab)
			}
			return data.NewText(data.Corpus, c.Batch, seqLen, c.Seed)
		case "synthetic":
			return data.NewSyntheticTokens(c.Batch, seqLen, vocab, c.Seed)
		}
		return nil, fmt.Errorf("unknown --data %q: use text, synthetic or a FILE.npy of token ids [sequences, length]", name)
	}
	return nil, fmt.Errorf("the CLI has no data for the model %v: train it from Go with data of your own (train.Trainer.Run)", c.Model)
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
