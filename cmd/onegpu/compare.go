package main

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/gomlx/gomlx/pkg/core/dtypes"

	"github.com/onegpu/onegpu/analysis"
	"github.com/onegpu/onegpu/flags"
	"github.com/onegpu/onegpu/platform"
	"github.com/onegpu/onegpu/recipes"
	"github.com/onegpu/onegpu/train"
)

func init() {
	register(command{
		name:    "compare",
		summary: "train the same runs in onegpu and in the JAX/Flax reference side by side: losses, step time, memory, tokens/s",
		run:     func(args []string) error { return runCompare(args, os.Stdout, os.Stderr) },
	})
}

// compareSets are the configurations `onegpu compare --configs NAME` runs, each written with the
// flags train and memory take. Dropout is always 0 in a comparison: random masks cannot match.
var compareSets = map[string][]string{
	// cpu: seconds each on two cores, the tutorial's techniques on the tiny GPT.
	"cpu": {
		"--model mlp",
		"--model gpt --preset tiny --policy float32 --remat none --microbatches 1",
		"--model gpt --preset tiny --policy params=float32,compute=bfloat16,output=float32 --remat mlp,attn --microbatches 4",
		"--model gpt --preset tiny --policy float32 --remat block --microbatches 4",
	},
	// llama: the tiny Llama (models.py's Flax Llama on the JAX side), in float32 and with the
	// techniques, seconds each.
	"llama": {
		"--model llama --preset tiny --policy float32 --remat none --microbatches 1",
		"--model llama --preset tiny --policy params=float32,compute=bfloat16,output=float32 --remat mlp,attn --microbatches 4",
		"--model llama --preset tiny --policy float32 --remat block --microbatches 4",
	},
	// gpu: the tutorial's 155,877,376-parameter GPT, as the tutorial trains it and without its
	// techniques, and the MLP of Part 1.1.
	"gpu": {
		"--model gpt --preset tutorial --policy params=float32,compute=bfloat16,output=float32 --remat mlp,attn --microbatches 4",
		"--model gpt --preset tutorial --policy float32 --remat none --microbatches 4",
		"--model gpt --preset tutorial --policy params=float32,compute=bfloat16,output=float32 --remat none --microbatches 4",
		"--model mlp",
	},
}

// Default tolerances on the largest relative loss difference over the steps, by compute dtype,
// for the default 10 steps (see docs/jax-comparison.md). Measured on CPU (XLA of
// jaxlib 0.11.2, tiny GPT, 10 steps): float32 sides differ by at most 1.3e-6 (the order of
// roundings: fusion, reduction order, sum·2^-k / count·2^-k vs a mean of micro-batch means), while
// mistakes injected into the reference move the loss by 1.5e-5 (Adam's eps 1e-7 instead of 1e-8),
// 2e-3 (peak learning rate 1% off) and 1.9e-2 (warm-up one step off). bfloat16 sides differ by up to
// 4.4e-4 on XLA (8-bit mantissas rounded in different places: LayerNorm's gain, GELU's operation
// order, the embedding gradient's dtype) and by up to 2.8e-3 on the embedded backend, whose
// bfloat16 elementwise arithmetic truncates its results instead of rounding to nearest (GoMLX
// v0.26.0's bfloat16.FromFloat32; onegpu rounds the conversions and matrix products itself, see
// platform/bf16round.go: 4.9e-3 before), which biases those results toward zero. 1e-2 accepts both and
// still rejects a schedule one step off; a bfloat16 comparison cannot see the eps or 1% slips a
// float32 one catches.
const (
	compareTolF32  = 1e-5
	compareTolBF16 = 1e-2
)

// compareOptions are the choices of `onegpu compare`.
type compareOptions struct {
	configs               []string
	set                   string
	steps                 int
	backend, data         string
	python, script        string
	keep                  string
	tolF32, tolBF16       float64
	accumulate, layerDTyp string
	// jaxRuntime is "plugin" (the reference runs on onegpu's PJRT plugin) or "own" (JAX's runtime).
	jaxRuntime string
	asJSON     bool
	jsonFile   string
	// jaxTimeout bounds each run of the reference.
	jaxTimeout time.Duration
	// memoryOnly compiles both sides' steps without training; hloDir is where XLA dumps
	// onegpu's optimized step for the census (empty on the embedded backend).
	memoryOnly bool
	hloDir     string
	// optimizer is the optimizer of the configurations that name none; referenceArgs are, while a
	// configuration runs, the reference's arguments for its optimizer (referenceOptimizerArgs).
	optimizer     string
	referenceArgs []string
	// signals is done at the first SIGINT or SIGTERM: the reference is stopped, and so is the
	// comparison after the configuration that runs (nil: never).
	signals context.Context
}

// compareFlagList is a repeatable string flag.
type compareFlagList []string

func (l *compareFlagList) String() string     { return strings.Join(*l, "; ") }
func (l *compareFlagList) Set(s string) error { *l = append(*l, s); return nil }

func runCompare(args []string, w, progress io.Writer) (err error) {
	defer inFlags(&err)
	fs := newFlagSet("compare", `[--configs cpu|llama|gpu | --model M [--preset P] | --config "FLAGS"...] [--optimizer adam|adamw|adafactor] [--steps N] [--backend SPEC] [--python PATH] [--keep DIR] [--json] [--json-file FILE]`)
	var o compareOptions
	var custom compareFlagList
	fs.Var(&custom, "config", `one configuration, written with train's flags, e.g. "--model gpt --preset tiny --policy float32 --remat none --microbatches 1" (repeatable; replaces --configs) (default: the set --configs names)`)
	fs.StringVar(&o.set, "configs", "cpu", "the set of configurations: cpu (tiny GPT and MLP, seconds each), llama (the tiny Llama, seconds each) or gpu (the tutorial's GPT and MLP)")
	model := fs.String("model", "", "run the configurations of the cpu and llama sets that train this model (gpt, llama or mlp) instead of a set (default: the set --configs names)")
	preset := fs.String("preset", "", "with --model, the preset of its configurations (default: theirs, tiny)")
	fs.IntVar(&o.steps, "steps", 10, "train steps per configuration, on each side")
	fs.StringVar(&o.optimizer, "optimizer", "adam", "the optimizer of both sides, for the configurations that name none: adam, adamw or adafactor, against optax's of the same name "+
		"(8-bit Adam has no optax counterpart)")
	fs.StringVar(&o.backend, "backend", "", `onegpu's backend: "go" or "xla:/abs/path/plugin.so" (default: $GOMLX_BACKEND, then XLA with $ONEGPU_PJRT_PLUGIN — the same XLA as JAX's — then the embedded backend)`)
	fs.StringVar(&o.data, "data", "synthetic", "gpt data: synthetic (the tutorial's fixed random batch) or text (byte-level batches of the shipped corpus)")
	fs.StringVar(&o.python, "python", "", "the Python with jax, flax and optax (default: $ONEGPU_PYTHON, then .venv/bin/python in this folder or a parent, then python3)")
	fs.StringVar(&o.script, "script", "", "the JAX reference (default: reference/jax/tutorial.py in this folder or a parent)")
	fs.StringVar(&o.keep, "keep", "", "write each configuration's exported weights, data and config under this folder and keep them (default: a temporary folder, removed)")
	fs.Float64Var(&o.tolF32, "tol-f32", compareTolF32, "largest relative loss difference that agrees, float32 compute; at least 0")
	fs.Float64Var(&o.tolBF16, "tol-bf16", compareTolBF16, "largest relative loss difference that agrees, bfloat16 or float16 compute; at least 0")
	fs.StringVar(&o.accumulate, "jax-accumulate", "auto", "the reference's micro-batch loop: auto (the tutorial's: scan for gpt, loop for mlp), loop or scan")
	fs.StringVar(&o.layerDTyp, "jax-layer-dtypes", "flax", "where the reference's LayerNorm and Embed cast in bfloat16: flax (the tutorial's layers) or onegpu (onegpu's placement)")
	fs.StringVar(&o.jaxRuntime, "jax-runtime", "plugin", "where the reference runs with an XLA backend: plugin (onegpu's PJRT plugin: one runtime for both sides, so step times compare the programs) or own (JAX's own runtime: on CPU jaxlib's built-in client, a different build)")
	fs.DurationVar(&o.jaxTimeout, "jax-timeout", 30*time.Minute, "stop the reference when one configuration runs longer than this, e.g. 90s, 2h (a reference that hangs is reported, and the next configuration runs)")
	fs.BoolVar(&o.memoryOnly, "memory-only", false, "compile both sides' train steps without training: XLA's compiled memory, the HLO census and the build+compile time (minutes at tutorial scale)")
	fs.BoolVar(&o.asJSON, "json", false, "print one JSON object")
	fs.StringVar(&o.jsonFile, "json-file", "", "also write the JSON object to this file, with the tables on stdout (default: no file)")
	if err := parseArgs(fs, args); err != nil {
		return err
	}
	if o.steps < 1 {
		return fmt.Errorf("--steps %d: train at least one step", o.steps)
	}
	if _, err := referenceOptimizerArgs(o.optimizer, 0); err != nil {
		return fmt.Errorf("--optimizer %s: %w", o.optimizer, err)
	}
	if o.jaxTimeout <= 0 {
		return fmt.Errorf("--jax-timeout %v: give the reference a positive time, e.g. 30m", o.jaxTimeout)
	}
	for _, tol := range []struct {
		name  string
		value float64
	}{{"tol-f32", o.tolF32}, {"tol-bf16", o.tolBF16}} {
		if !(tol.value >= 0) {
			return fmt.Errorf("--%s %g: a tolerance is at least 0", tol.name, tol.value)
		}
	}
	for _, enum := range []struct {
		name, value string
		values      []string
	}{{"data", o.data, []string{"synthetic", "text"}}, {"jax-accumulate", o.accumulate, []string{"auto", "loop", "scan"}},
		{"jax-layer-dtypes", o.layerDTyp, []string{"flax", "onegpu"}}, {"jax-runtime", o.jaxRuntime, []string{"plugin", "own"}}} {
		if !slices.Contains(enum.values, enum.value) {
			return fmt.Errorf("unknown --%s %q: use %s", enum.name, enum.value, strings.Join(enum.values, ", "))
		}
	}
	o.configs = custom
	if len(o.configs) > 0 {
		if err := notApplicable(given(fs), "--config replaces the set of configurations", "configs"); err != nil {
			return err
		}
	}
	for _, c := range custom {
		if strings.TrimSpace(c) == "" {
			return fmt.Errorf("--config '': write a configuration with train's flags, e.g. \"--model mlp\"")
		}
	}
	if set := given(fs); set["model"] || set["preset"] {
		if !set["model"] {
			return fmt.Errorf("--preset %s needs --model: compare --model llama --preset tiny", *preset)
		}
		if err := notApplicable(set, "--model picks the configurations", "config", "configs"); err != nil {
			return err
		}
		var err error
		if o.configs, err = modelConfigs(*model, *preset); err != nil {
			return err
		}
	}
	if len(o.configs) == 0 {
		set, ok := compareSets[o.set]
		if !ok {
			return fmt.Errorf("unknown --configs %q: use cpu, llama or gpu, or give --config", o.set)
		}
		o.configs = set
	}
	for _, c := range o.configs { // every configuration is readable before any runs
		if _, _, err := compareConfig(c, o.backend, o.optimizer); err != nil {
			return err
		}
	}
	if o.jsonFile != "" { // and every output can be written
		if err := checkOutputFile("json-file", o.jsonFile); err != nil {
			return err
		}
	}
	if o.keep != "" {
		if err := checkOutputFolder("keep", o.keep); err != nil {
			return err
		}
	}
	if o.python, err = comparePython(o.python); err != nil {
		return err
	}
	if o.script, err = compareScript(o.script); err != nil {
		return err
	}
	root := o.keep
	if root == "" {
		if root, err = os.MkdirTemp("", "onegpu-compare-"); err != nil {
			return err
		}
		defer os.RemoveAll(root)
	}
	o.hloDir = hloDumpDir(filepath.Join(root, "hlo"))
	// SIGINT or SIGTERM stops the reference at once and the comparison after its configuration,
	// so that the temporary folder is removed (a second signal ends the process as usual).
	var stopSignals context.CancelFunc
	o.signals, stopSignals = signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stopSignals()
	go func() { <-o.signals.Done(); stopSignals() }()
	report := compareReport{Steps: o.steps, Python: o.python, Script: o.script, Agree: true, MemoryOnly: o.memoryOnly}
	for i, flagsText := range o.configs {
		r := compareOne(o, flagsText, filepath.Join(root, fmt.Sprintf("config_%d", i)), progress)
		if o.signals.Err() != nil {
			what := "its temporary folder removed"
			if o.keep != "" {
				what = "--keep " + o.keep + " holds what it wrote"
			}
			return fmt.Errorf("compare stopped by a signal during configuration %d of %d (%s); %s", i+1, len(o.configs), r.Name, what)
		}
		report.Agree = report.Agree && r.Agree
		report.Configs = append(report.Configs, r)
	}
	if o.jsonFile != "" {
		f, err := os.Create(o.jsonFile)
		if err != nil {
			return err
		}
		werr := writeJSON(f, report)
		if err := f.Close(); werr == nil {
			werr = err
		}
		if werr != nil {
			return fmt.Errorf("--json-file: %w", werr)
		}
	}
	if o.asJSON {
		if err := writeJSON(w, report); err != nil {
			return err
		}
	} else {
		for _, r := range report.Configs {
			r.writeTable(w)
		}
		fmt.Fprintln(w, report.summary())
	}
	if !report.Agree {
		return &exitError{code: 1}
	}
	return nil
}

// compareReport is what `onegpu compare --json` prints.
type compareReport struct {
	Steps  int    `json:"steps"`
	Python string `json:"python"`
	Script string `json:"script"`
	Agree  bool   `json:"agree"`
	// MemoryOnly: the steps were compiled, not trained (no losses to agree on).
	MemoryOnly bool             `json:"memory_only,omitempty"`
	Configs    []*compareResult `json:"configs"`
}

func (r compareReport) summary() string {
	agree := 0
	for _, c := range r.Configs {
		if c.Agree {
			agree++
		}
	}
	if r.MemoryOnly {
		return fmt.Sprintf("%d of %d configurations compiled on both sides", agree, len(r.Configs))
	}
	return fmt.Sprintf("%d of %d configurations agree with JAX", agree, len(r.Configs))
}

// compareResult is one configuration on both sides.
type compareResult struct {
	Name    string       `json:"name"`
	Flags   string       `json:"flags"`
	Config  string       `json:"config"`
	Backend string       `json:"backend"`
	Data    string       `json:"data"`
	Folder  string       `json:"folder,omitempty"`
	Ours    *compareSide `json:"onegpu,omitempty"`
	JAX     *compareSide `json:"jax,omitempty"`
	// LossRelDiff is |ours - JAX| / |JAX| at each step; MaxRelDiff its largest value, which must
	// not exceed Tolerance (chosen by Compute, the compute dtype) for Agree.
	LossRelDiff floats  `json:"loss_rel_diff,omitempty"`
	MaxRelDiff  float64 `json:"max_rel_diff"`
	Tolerance   float64 `json:"tolerance"`
	Compute     string  `json:"compute_dtype"`
	unit        string  // what throughput counts: tokens or examples
	Agree       bool    `json:"agree"`
	Error       string  `json:"error,omitempty"`
	// Optimizer is onegpu's; the reference runs optax's of the same name.
	Optimizer string `json:"optimizer"`
}

// compareSide is one framework's run of a configuration. The JAX side is read from the
// reference's JSON, which uses the same field names.
type compareSide struct {
	Framework        string   `json:"framework"`
	Version          string   `json:"jax,omitempty"`
	Platform         string   `json:"platform,omitempty"`
	Runtime          string   `json:"runtime,omitempty"` // the reference's: JAX's own, or onegpu's PJRT plugin
	DeviceKind       string   `json:"device_kind,omitempty"`
	Loss             floats   `json:"loss"`
	Accuracy         floats   `json:"accuracy"`
	StepSeconds      floats   `json:"step_seconds"`
	FirstStepSeconds float64  `json:"first_step_seconds"`
	CompileSeconds   float64  `json:"compile_seconds,omitempty"`
	BuildSeconds     float64  `json:"build_seconds,omitempty"` // onegpu's graph building, part of the first step
	MeanStepSeconds  *float64 `json:"mean_step_seconds"`
	TokensPerSecond  *float64 `json:"tokens_per_second"`
	// Memory is XLA's account of the compiled step (MemoryKind "xla_compiled"), or on the
	// embedded backend onegpu's estimate ("estimate": total is the estimated peak).
	Memory     *compareMemory `json:"memory"`
	MemoryKind string         `json:"memory_kind,omitempty"`
	Accumulate string         `json:"accumulate,omitempty"`
	LayerDType string         `json:"layer_dtypes,omitempty"`
	// Census counts the optimized HLO of the compiled step by op and element type (XLA only).
	Census *analysis.HLOCensus `json:"census,omitempty"`
}

// compareMemory are compiled memory statistics in bytes, in JAX's memory_analysis() terms.
type compareMemory struct {
	ArgumentBytes   int64  `json:"argument_bytes"`
	OutputBytes     int64  `json:"output_bytes"`
	AliasBytes      int64  `json:"alias_bytes"`
	TempBytes       int64  `json:"temp_bytes"`
	CodeBytes       int64  `json:"code_bytes"`
	PeakMemoryBytes *int64 `json:"peak_memory_bytes,omitempty"`
	TotalBytes      int64  `json:"total_bytes"`
}

// compareConfig reads one configuration written with train's flags, with dropout 0 (random masks
// cannot match), and backend and optimizer as its own unless it names them. An optimizer the
// reference has no counterpart for is an error.
func compareConfig(flagsText, backend, optimizer string) (setup, train.Config, error) {
	fail := func(err error) (setup, train.Config, error) {
		return setup{}, train.Config{}, fmt.Errorf("--config %q: %w", flagsText, err)
	}
	s, err := parseSetup("compare --config", strings.Fields(flagsText))
	if err != nil {
		return fail(err)
	}
	if err := notApplicable(s.given(), "compare runs without dropout (random masks cannot match)", "dropout"); err != nil {
		return fail(err)
	}
	if s.backend == "" {
		s.backend = backend
	}
	if !s.given()["optimizer"] {
		s.optimizer = optimizer
	}
	config, err := s.config()
	if err != nil {
		return fail(err)
	}
	if _, err := referenceOptimizerArgs(s.optimizer, s.weightDecay); err != nil {
		return fail(err)
	}
	if config.LossScale != nil {
		return fail(fmt.Errorf("compare runs without loss scaling (the reference has none)"))
	}
	if config.ClipNorm > 0 {
		return fail(fmt.Errorf("compare runs without clipping (the reference has none)"))
	}
	family, err := recipes.Lookup(s.model)
	if err != nil {
		return fail(err)
	}
	if family.WithDropout != nil {
		config.Model = family.WithDropout(config.Model, 0)
	}
	return *s, config, nil
}

// compareOne runs one configuration on both sides; failures are recorded in the result.
func compareOne(o compareOptions, flagsText, folder string, progress io.Writer) *compareResult {
	r := &compareResult{Flags: flagsText, Name: flagsText}
	if o.keep != "" {
		r.Folder = folder
	}
	fail := func(err error) *compareResult {
		r.Error = err.Error()
		fmt.Fprintf(progress, "compare: %s: %v\n", r.Name, err)
		return r
	}
	s, config, err := compareConfig(flagsText, o.backend, o.optimizer)
	if err != nil {
		return fail(err)
	}
	r.Optimizer = cmp.Or(s.optimizer, "adam")
	if o.referenceArgs, err = referenceOptimizerArgs(s.optimizer, s.weightDecay); err != nil {
		return fail(err)
	}
	r.Name, r.Config = compareName(s, config), describe(config)
	r.unit = "tokens"
	if _, ok := config.Model.(train.LanguageModel); !ok {
		r.unit = "examples"
	}
	r.Compute = config.Policy.Compute.String()
	r.Tolerance = o.tolF32
	if config.Policy.Compute == dtypes.BFloat16 || config.Policy.Compute == dtypes.Float16 {
		r.Tolerance = o.tolBF16
	}
	batches, err := batchData(config, o.data)
	if err != nil {
		return fail(err)
	}
	r.Data = batches.Describe()

	fmt.Fprintf(progress, "== %s\n   onegpu: %s\n   optimizer: %s, against %s\n", r.Name, r.Config, r.Optimizer, compareOptimizers[r.Optimizer])
	if spec, err := platform.ResolveBackend(s.backend); err == nil && spec.Kind == "xla" && o.hloDir != "" {
		// XLA reads its flags once per process: every configuration dumps to the same folder.
		s.xlaPresets = append(s.xlaPresets, flags.Dump(o.hloDir, "^"+train.StepName, ""))
	}
	if o.memoryOnly {
		return compareCompiled(o, r, &s, config, batches, folder, progress)
	}
	ours, spec, err := runOnegpuSide(&s, config, batches, o.steps, o.hloDir, folder, progress)
	r.Backend = spec.String()
	if err != nil {
		return fail(err)
	}
	r.Ours = ours
	theirs, err := runJAXSide(o, spec, folder, false, progress)
	if err != nil {
		return fail(err)
	}
	r.JAX = theirs
	if len(theirs.Loss) != len(ours.Loss) {
		return fail(fmt.Errorf("the reference trained %d steps, onegpu %d", len(theirs.Loss), len(ours.Loss)))
	}
	for i := range ours.Loss {
		d := compareRelDiff(ours.Loss[i], theirs.Loss[i])
		r.LossRelDiff = append(r.LossRelDiff, d)
		r.MaxRelDiff = max(r.MaxRelDiff, d)
	}
	r.Agree = r.MaxRelDiff <= r.Tolerance
	verdict := "agree"
	if !r.Agree {
		verdict = "DISAGREE"
	}
	fmt.Fprintf(progress, "   %s: largest relative loss difference %.2g (tolerance %.0e)\n", verdict, r.MaxRelDiff, r.Tolerance)
	return r
}

// compareName is a short name of a configuration.
func compareName(s setup, c train.Config) string {
	if _, ok := c.Model.(train.LanguageModel); !ok {
		return fmt.Sprintf("%s, %s, batch %d, %s", s.model, c.Policy, c.Batch, plural(c.MicroBatches, "micro-batch"))
	}
	return fmt.Sprintf("%s %s, %s, remat %s, %s%s", s.model, s.preset, c.Policy, c.Remat, plural(c.MicroBatches, "micro-batch"), chunkingNote(c))
}
