package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/gomlx/gomlx/pkg/core/dtypes"

	ograph "github.com/onegpu/onegpu/graph"
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
// for the default 10 steps (see the README's "Side by side with JAX"). Measured on CPU (XLA of
// jaxlib 0.11.2, tiny GPT, 10 steps): float32 sides differ by at most 1.3e-6 (the order of
// roundings: fusion, reduction order, sum·2^-k / count·2^-k vs a mean of micro-batch means), while
// mistakes injected into the reference move the loss by 1.5e-5 (Adam's eps 1e-7 instead of 1e-8),
// 2e-3 (peak learning rate 1% off) and 1.9e-2 (warm-up one step off). bfloat16 sides differ by up to
// 4.4e-4 on XLA (8-bit mantissas rounded in different places: LayerNorm's gain, GELU's operation
// order, the embedding gradient's dtype) and by up to 4.9e-3 on the embedded backend, whose
// float32-to-bfloat16 conversion truncates instead of rounding to nearest (GoMLX v0.26.0's
// bfloat16.FromFloat32), which biases every bfloat16 result toward zero. 1e-2 accepts both and
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
	asJSON                bool
	jsonFile              string
}

// compareFlagList is a repeatable string flag.
type compareFlagList []string

func (l *compareFlagList) String() string     { return strings.Join(*l, "; ") }
func (l *compareFlagList) Set(s string) error { *l = append(*l, s); return nil }

func runCompare(args []string, w, progress io.Writer) error {
	fs := newFlagSet("compare", `[--configs cpu|gpu] [--config "FLAGS"]... [--steps N] [--backend SPEC] [--python PATH] [--keep DIR] [--json] [--json-file FILE]`)
	var o compareOptions
	var custom compareFlagList
	fs.Var(&custom, "config", `one configuration, written with train's flags, e.g. "--model gpt --preset tiny --policy float32 --remat none --microbatches 1" (repeatable; replaces --configs)`)
	fs.StringVar(&o.set, "configs", "cpu", "the set of configurations: cpu (tiny GPT and MLP, seconds each) or gpu (the tutorial's GPT and MLP)")
	fs.IntVar(&o.steps, "steps", 10, "train steps per configuration, on each side")
	fs.StringVar(&o.backend, "backend", "", `onegpu's backend: "go" or "xla:/abs/path/plugin.so" (default: $GOMLX_BACKEND, then XLA with $ONEGPU_PJRT_PLUGIN — the same XLA as JAX's — then the embedded backend)`)
	fs.StringVar(&o.data, "data", "synthetic", "gpt data: synthetic (the tutorial's fixed random batch) or text (byte-level batches of the shipped corpus)")
	fs.StringVar(&o.python, "python", "", "the Python with jax, flax and optax (default: $ONEGPU_PYTHON, then .venv/bin/python in this folder or a parent, then python3)")
	fs.StringVar(&o.script, "script", "", "the JAX reference (default: reference/jax/tutorial.py in this folder or a parent)")
	fs.StringVar(&o.keep, "keep", "", "write each configuration's exported weights, data and config under this folder and keep them (default: a temporary folder, removed)")
	fs.Float64Var(&o.tolF32, "tol-f32", compareTolF32, "largest relative loss difference that agrees, float32 compute")
	fs.Float64Var(&o.tolBF16, "tol-bf16", compareTolBF16, "largest relative loss difference that agrees, bfloat16 or float16 compute")
	fs.StringVar(&o.accumulate, "jax-accumulate", "auto", "the reference's micro-batch loop: auto (the tutorial's: scan for gpt, loop for mlp), loop or scan")
	fs.StringVar(&o.layerDTyp, "jax-layer-dtypes", "flax", "where the reference's LayerNorm and Embed cast in bfloat16: flax (the tutorial's layers) or onegpu (onegpu's placement)")
	fs.BoolVar(&o.asJSON, "json", false, "print one JSON object")
	fs.StringVar(&o.jsonFile, "json-file", "", "also write the JSON object to this file (with the tables on stdout)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q (flags go before them; see onegpu compare -h)", fs.Args())
	}
	if o.steps < 1 {
		return fmt.Errorf("--steps %d: train at least one step", o.steps)
	}
	o.configs = custom
	if len(o.configs) == 0 {
		set, ok := compareSets[o.set]
		if !ok {
			return fmt.Errorf("unknown --configs %q: use cpu or gpu, or give --config", o.set)
		}
		o.configs = set
	}
	var err error
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
	report := compareReport{Steps: o.steps, Python: o.python, Script: o.script, Agree: true}
	for i, flagsText := range o.configs {
		r := compareOne(o, flagsText, filepath.Join(root, fmt.Sprintf("config_%d", i)), progress)
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
	Steps   int              `json:"steps"`
	Python  string           `json:"python"`
	Script  string           `json:"script"`
	Agree   bool             `json:"agree"`
	Configs []*compareResult `json:"configs"`
}

func (r compareReport) summary() string {
	agree := 0
	for _, c := range r.Configs {
		if c.Agree {
			agree++
		}
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
}

// compareSide is one framework's run of a configuration. The JAX side is read from the
// reference's JSON, which uses the same field names.
type compareSide struct {
	Framework        string   `json:"framework"`
	Version          string   `json:"jax,omitempty"`
	Platform         string   `json:"platform,omitempty"`
	DeviceKind       string   `json:"device_kind,omitempty"`
	Loss             floats   `json:"loss"`
	Accuracy         floats   `json:"accuracy"`
	StepSeconds      floats   `json:"step_seconds"`
	FirstStepSeconds float64  `json:"first_step_seconds"`
	CompileSeconds   float64  `json:"compile_seconds,omitempty"`
	MeanStepSeconds  *float64 `json:"mean_step_seconds"`
	TokensPerSecond  *float64 `json:"tokens_per_second"`
	// Memory is XLA's account of the compiled step (MemoryKind "xla_compiled"), or on the
	// embedded backend onegpu's estimate ("estimate": total is the estimated peak).
	Memory     *compareMemory `json:"memory"`
	MemoryKind string         `json:"memory_kind,omitempty"`
	Accumulate string         `json:"accumulate,omitempty"`
	LayerDType string         `json:"layer_dtypes,omitempty"`
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
	fs := flag.NewFlagSet("compare --config", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	var s setup
	s.register(fs, "gpt", "tiny")
	if err := fs.Parse(strings.Fields(flagsText)); err != nil {
		return fail(fmt.Errorf("--config %q: %w", flagsText, err))
	}
	if s.backend == "" {
		s.backend = o.backend
	}
	config, err := s.config()
	if err != nil {
		return fail(fmt.Errorf("--config %q: %w", flagsText, err))
	}
	if config.LossScale != "none" && config.LossScale != "" {
		return fail(fmt.Errorf("--config %q: compare runs without loss scaling (the reference has none)", flagsText))
	}
	config.GPT.Dropout, config.Classifier.Dropout = 0, 0
	r.Name, r.Config = compareName(s, config), describe(config)
	r.unit = "tokens"
	if config.Model == "mlp" {
		r.unit = "examples"
	}
	r.Compute = config.Policy.Compute.String()
	r.Tolerance = o.tolF32
	if config.Policy.Compute == dtypes.BFloat16 || config.Policy.Compute == dtypes.Float16 {
		r.Tolerance = o.tolBF16
	}
	data, err := trainingData(config, o.data)
	if err != nil {
		return fail(err)
	}
	r.Data = data.Describe()

	fmt.Fprintf(progress, "== %s\n   onegpu: %s\n", r.Name, r.Config)
	ours, spec, err := runOnegpuSide(&s, config, data, o.steps, folder, progress)
	r.Backend = spec.String()
	if err != nil {
		return fail(err)
	}
	r.Ours = ours
	theirs, err := runJAXSide(o, folder, progress)
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
	if c.Model == "mlp" {
		return fmt.Sprintf("mlp, %s, batch %d, %s", c.Policy, c.Batch, plural(c.MicroBatches, "micro-batch"))
	}
	return fmt.Sprintf("gpt %s, %s, remat %s, %s", s.preset, c.Policy, c.Remat, plural(c.MicroBatches, "micro-batch"))
}

// runOnegpuSide initializes the model, exports it with the data to folder, trains steps steps and
// measures them. The backend is released before returning, so that the reference has the device
// to itself.
func runOnegpuSide(s *setup, config train.Config, data train.Data, steps int, folder string, progress io.Writer) (*compareSide, ograph.BackendSpec, error) {
	backend, spec, err := s.newBackend()
	if err != nil {
		return nil, spec, err
	}
	defer backend.Finalize()
	trainer, err := train.New(backend, config)
	if err != nil {
		return nil, spec, err
	}
	defer trainer.Close()
	if err := trainer.Initialize(); err != nil {
		return nil, spec, err
	}
	if _, err := trainer.Export(folder, data, steps); err != nil {
		return nil, spec, err
	}
	side := &compareSide{Framework: "onegpu", Platform: spec.Kind}
	fmt.Fprintf(progress, "   onegpu on %s: weights, data and config exported to %s\n", spec, folder)
	for i := range steps {
		batch := data.Batch(i)
		start := time.Now()
		var m train.StepMetrics
		if i == 0 {
			var mem *ograph.CompiledMemory
			m, mem, err = trainer.StepCompiled(batch)
			if mem != nil {
				side.Memory = &compareMemory{ArgumentBytes: mem.ArgumentBytes, OutputBytes: mem.OutputBytes, AliasBytes: mem.AliasBytes,
					TempBytes: mem.TemporaryBytes, CodeBytes: mem.CodeBytes, TotalBytes: mem.TotalBytes()}
				side.MemoryKind = "xla_compiled"
			}
		} else {
			m, err = trainer.Step(batch)
		}
		if err != nil {
			return nil, spec, err
		}
		elapsed := time.Since(start).Seconds()
		side.Loss, side.Accuracy, side.StepSeconds = append(side.Loss, m.Loss), append(side.Accuracy, m.Accuracy), append(side.StepSeconds, elapsed)
		fmt.Fprintf(progress, "   [onegpu] step %d/%d  loss %.6f  accuracy %.4f  %.3fs\n", i+1, steps, m.Loss, m.Accuracy, elapsed)
	}
	side.FirstStepSeconds = side.StepSeconds[0]
	if steps > 1 {
		var total float64
		for _, t := range side.StepSeconds[1:] {
			total += t
		}
		mean := total / float64(steps-1)
		perStep := float64(config.Batch)
		if config.Model == "gpt" {
			perStep *= float64(config.GPT.SeqLen)
		}
		tps := perStep / mean
		side.MeanStepSeconds, side.TokensPerSecond = &mean, &tps
	}
	if side.Memory == nil { // the embedded backend: onegpu's estimate of its sequential execution
		p, err := trainer.Program()
		if err != nil {
			return nil, spec, err
		}
		m := ograph.Analyze(p)
		p.Graph.Finalize()
		side.Memory = &compareMemory{ArgumentBytes: m.ArgumentBytes, TempBytes: m.PeakTempBytes, TotalBytes: m.PeakBytes}
		side.MemoryKind = "estimate"
	}
	return side, spec, nil
}

// runJAXSide runs the reference on folder and reads its JSON.
func runJAXSide(o compareOptions, folder string, progress io.Writer) (*compareSide, error) {
	args := []string{o.script, folder, "--accumulate", o.accumulate, "--layer-dtypes", o.layerDTyp}
	cmd := exec.CommandContext(context.Background(), o.python, args...)
	var stdout bytes.Buffer
	cmd.Stdout = &stdout
	cmd.Stderr = comparePrefixWriter{w: progress, prefix: "   "}
	fmt.Fprintf(progress, "   JAX: %s %s\n", o.python, strings.Join(args, " "))
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("the JAX reference (%s %s) failed: %w", o.python, o.script, err)
	}
	// The result is the whole output, or its last line if a library printed something before it.
	var side compareSide
	text := strings.TrimSpace(stdout.String())
	if err := json.Unmarshal([]byte(text), &side); err != nil {
		lastLine := text[strings.LastIndex(text, "\n")+1:]
		if err := json.Unmarshal([]byte(lastLine), &side); err != nil {
			return nil, fmt.Errorf("the JAX reference printed no JSON result (%v): %q", err, stdout.String())
		}
	}
	side.MemoryKind = "xla_compiled"
	return &side, nil
}

// comparePrefixWriter indents what another program writes to our progress stream.
type comparePrefixWriter struct {
	w      io.Writer
	prefix string
}

func (p comparePrefixWriter) Write(b []byte) (int, error) {
	text := strings.TrimRight(string(b), "\n")
	if text != "" {
		fmt.Fprintln(p.w, p.prefix+strings.ReplaceAll(text, "\n", "\n"+p.prefix))
	}
	return len(b), nil
}

// compareRelDiff is |a - b| / |b|, or |a - b| when b is 0; math.MaxFloat64 when either is not
// finite (JSON has no NaN).
func compareRelDiff(a, b float64) float64 {
	d := math.Abs(a - b)
	if b != 0 {
		d /= math.Abs(b)
	}
	if math.IsNaN(d) || math.IsInf(d, 0) || math.IsInf(a, 0) {
		return math.MaxFloat64
	}
	return d
}

// floats is a list of numbers whose non-finite values are null in JSON, both ways (the
// reference writes a NaN loss as null).
type floats []float64

func (f floats) MarshalJSON() ([]byte, error) {
	parts := make([]string, len(f))
	for i, v := range f {
		if math.IsNaN(v) || math.IsInf(v, 0) {
			parts[i] = "null"
		} else {
			parts[i] = strconv.FormatFloat(v, 'g', -1, 64)
		}
	}
	return []byte("[" + strings.Join(parts, ",") + "]"), nil
}

func (f *floats) UnmarshalJSON(b []byte) error {
	var values []*float64
	if err := json.Unmarshal(b, &values); err != nil {
		return err
	}
	*f = make(floats, len(values))
	for i, v := range values {
		(*f)[i] = math.NaN()
		if v != nil {
			(*f)[i] = *v
		}
	}
	return nil
}

// comparePython returns the Python to run the reference with.
func comparePython(flagValue string) (string, error) {
	if flagValue != "" {
		return flagValue, nil
	}
	if p := os.Getenv("ONEGPU_PYTHON"); p != "" {
		return p, nil
	}
	if p, ok := compareFindUp(filepath.Join(".venv", "bin", "python")); ok {
		return p, nil
	}
	if p, err := exec.LookPath("python3"); err == nil {
		return p, nil
	}
	return "", errors.New("no Python found: give --python, set $ONEGPU_PYTHON, or create .venv (see .ci/run)")
}

// compareScript returns the reference script's path.
func compareScript(flagValue string) (string, error) {
	if flagValue != "" {
		if _, err := os.Stat(flagValue); err != nil {
			return "", fmt.Errorf("--script: %w", err)
		}
		return flagValue, nil
	}
	if p, ok := compareFindUp(filepath.Join("reference", "jax", "tutorial.py")); ok {
		return p, nil
	}
	return "", errors.New("reference/jax/tutorial.py not found in this folder or a parent: run from the onegpu checkout or give --script")
}

// compareFindUp looks for rel in the working folder and its parents and returns its absolute path.
func compareFindUp(rel string) (string, bool) {
	dir, err := os.Getwd()
	if err != nil {
		return "", false
	}
	for {
		p := filepath.Join(dir, rel)
		if _, err := os.Stat(p); err == nil {
			return p, true
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", false
		}
		dir = parent
	}
}

// writeTable prints one configuration's side-by-side table.
func (r *compareResult) writeTable(w io.Writer) {
	fmt.Fprintf(w, "\n== %s\n", r.Name)
	if r.Config != "" {
		fmt.Fprintf(w, "%s; %s; dropout 0\n", r.Config, r.Data)
	}
	if r.Error != "" {
		fmt.Fprintf(w, "FAILED: %s\n", r.Error)
		return
	}
	o, j := r.Ours, r.JAX
	n := len(o.Loss)
	jaxName := fmt.Sprintf("JAX %s (%s)", j.Version, j.DeviceKind)
	fmt.Fprintf(w, "onegpu: %s\n", r.Backend)
	fmt.Fprintf(w, "%-26s %16s %16s %12s\n", "", "onegpu", "JAX", "onegpu/JAX")
	row := func(name, ours, theirs, ratio string) {
		fmt.Fprintf(w, "%-26s %16s %16s %12s\n", name, ours, theirs, ratio)
	}
	row("loss at step 1 (same weights)", fmt.Sprintf("%.6f", o.Loss[0]), fmt.Sprintf("%.6f", j.Loss[0]),
		fmt.Sprintf("Δ %.1e", r.LossRelDiff[0]))
	row(fmt.Sprintf("loss at step %d", n), fmt.Sprintf("%.6f", o.Loss[n-1]), fmt.Sprintf("%.6f", j.Loss[n-1]),
		fmt.Sprintf("Δ %.1e", r.LossRelDiff[n-1]))
	row(fmt.Sprintf("largest Δ over %d steps", n), "", "", fmt.Sprintf("%.1e", r.MaxRelDiff))
	row(fmt.Sprintf("accuracy at step %d", n), fmt.Sprintf("%.4f", o.Accuracy[n-1]), fmt.Sprintf("%.4f", j.Accuracy[n-1]), "")
	row("first step (compiles)", fmt.Sprintf("%.2f s", o.FirstStepSeconds), fmt.Sprintf("%.2f s", j.FirstStepSeconds),
		compareRatio(o.FirstStepSeconds, j.FirstStepSeconds))
	if o.MeanStepSeconds != nil && j.MeanStepSeconds != nil {
		row(fmt.Sprintf("step time (mean, 2..%d)", n), compareSeconds(*o.MeanStepSeconds), compareSeconds(*j.MeanStepSeconds),
			compareRatio(*o.MeanStepSeconds, *j.MeanStepSeconds))
	}
	if o.TokensPerSecond != nil && j.TokensPerSecond != nil {
		row(r.unit+"/s", compareRate(*o.TokensPerSecond), compareRate(*j.TokensPerSecond), compareRatio(*o.TokensPerSecond, *j.TokensPerSecond))
	}
	if o.Memory != nil && j.Memory != nil {
		kind := "XLA compiled"
		if o.MemoryKind == "estimate" {
			kind = "onegpu estimate"
		}
		row("memory ("+kind+")", "", "", "")
		row("  arguments", humanBytes(o.Memory.ArgumentBytes), humanBytes(j.Memory.ArgumentBytes), compareRatio(float64(o.Memory.ArgumentBytes), float64(j.Memory.ArgumentBytes)))
		if o.MemoryKind != "estimate" {
			row("  outputs", humanBytes(o.Memory.OutputBytes), humanBytes(j.Memory.OutputBytes), compareRatio(float64(o.Memory.OutputBytes), float64(j.Memory.OutputBytes)))
			row("  aliased", humanBytes(o.Memory.AliasBytes), humanBytes(j.Memory.AliasBytes), compareRatio(float64(o.Memory.AliasBytes), float64(j.Memory.AliasBytes)))
		}
		row("  temporary", humanBytes(o.Memory.TempBytes), humanBytes(j.Memory.TempBytes), compareRatio(float64(o.Memory.TempBytes), float64(j.Memory.TempBytes)))
		row("  total", humanBytes(o.Memory.TotalBytes), humanBytes(j.Memory.TotalBytes), compareRatio(float64(o.Memory.TotalBytes), float64(j.Memory.TotalBytes)))
		if j.Memory.PeakMemoryBytes != nil {
			row("  JAX peak_memory_in_bytes", "", humanBytes(*j.Memory.PeakMemoryBytes), "")
		}
	}
	verdict := fmt.Sprintf("agree: largest relative loss difference %.1e <= %.0e (%s compute)", r.MaxRelDiff, r.Tolerance, r.Compute)
	if !r.Agree {
		verdict = fmt.Sprintf("DISAGREE: largest relative loss difference %.1e > %.0e (%s compute)", r.MaxRelDiff, r.Tolerance, r.Compute)
	}
	fmt.Fprintf(w, "%s [%s]\n", verdict, jaxName)
}

func compareRatio(a, b float64) string {
	if b == 0 {
		return "-"
	}
	return fmt.Sprintf("%.2f", a/b)
}

func compareSeconds(s float64) string {
	if s < 1 {
		return fmt.Sprintf("%.1f ms", s*1000)
	}
	return fmt.Sprintf("%.2f s", s)
}

func compareRate(r float64) string {
	switch {
	case r >= 1e6:
		return fmt.Sprintf("%.2fM", r/1e6)
	case r >= 1e3:
		return fmt.Sprintf("%.1fk", r/1e3)
	}
	return fmt.Sprintf("%.0f", r)
}
