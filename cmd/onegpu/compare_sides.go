package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/onegpu/onegpu/analysis"
	"github.com/onegpu/onegpu/data"
	"github.com/onegpu/onegpu/flags"
	"github.com/onegpu/onegpu/platform"
	"github.com/onegpu/onegpu/train"
	"github.com/onegpu/onegpu/train/export"
)

// runOnegpuSide initializes the model, exports it with the data to folder, trains steps steps and
// measures them. The backend is released before returning, so that the reference has the device
// to itself.
func runOnegpuSide(s *setup, config train.Config, batches data.Data, steps int, hloDir, folder string, progress io.Writer) (*compareSide, platform.BackendSpec, error) {
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
	if _, err := export.Write(trainer, folder, batches, steps); err != nil {
		return nil, spec, err
	}
	side := &compareSide{Framework: "onegpu", Platform: spec.Kind}
	fmt.Fprintf(progress, "   onegpu on %s: weights, data and config exported to %s\n", spec, folder)
	for i := range steps {
		batch := batches.Batch(i)
		start := time.Now()
		var m train.StepMetrics
		if i == 0 {
			var mem *analysis.CompiledMemory
			dumped := dumpedHLO(hloDir)
			m, mem, err = trainer.StepCompiled(batch)
			if mem != nil {
				side.Memory, side.MemoryKind = compiledMemory(*mem), "xla_compiled"
				side.Census = newCensus(hloDir, dumped, progress)
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
		if lm, ok := config.Model.(train.LanguageModel); ok {
			seqLen, _ := lm.TokenShape()
			perStep *= float64(seqLen)
		}
		tps := perStep / mean
		side.MeanStepSeconds, side.TokensPerSecond = &mean, &tps
	}
	if side.Memory == nil { // the embedded backend: onegpu's estimate of its sequential execution
		p, err := trainer.Program()
		if err != nil {
			return nil, spec, err
		}
		m := analysis.Analyze(p)
		p.Graph.Finalize()
		side.Memory = &compareMemory{ArgumentBytes: m.ArgumentBytes, TempBytes: m.PeakTempBytes, TotalBytes: m.PeakBytes}
		side.MemoryKind = "estimate"
	}
	return side, spec, nil
}

// compileOnegpuSide builds and compiles the train step on XLA without running it, measures the
// time that takes, and exports the initial weights and one batch to folder for the reference.
func compileOnegpuSide(s *setup, config train.Config, batches data.Data, hloDir, folder string, progress io.Writer) (*compareSide, platform.BackendSpec, error) {
	backend, spec, err := s.newBackend()
	if err != nil {
		return nil, spec, err
	}
	defer backend.Finalize()
	if spec.Kind != "xla" {
		return nil, spec, fmt.Errorf("--memory-only compiles with XLA, the backend is %s: use --backend xla:/abs/path/plugin.so", spec)
	}
	trainer, err := train.New(backend, config)
	if err != nil {
		return nil, spec, err
	}
	defer trainer.Close()
	dumped := dumpedHLO(hloDir)
	start := time.Now()
	p, err := trainer.Program()
	if err != nil {
		return nil, spec, err
	}
	built := time.Since(start).Seconds()
	mem, err := analysis.CompileProgram(p)
	p.Graph.Finalize()
	if err != nil {
		return nil, spec, err
	}
	side := &compareSide{Framework: "onegpu", Platform: spec.Kind, FirstStepSeconds: time.Since(start).Seconds(), BuildSeconds: built,
		Memory: compiledMemory(mem), MemoryKind: "xla_compiled", Census: newCensus(hloDir, dumped, progress)}
	side.CompileSeconds = side.FirstStepSeconds - built
	fmt.Fprintf(progress, "   [onegpu] built in %.1f s, compiled in %.1f s: XLA needs %s\n", built, side.CompileSeconds, analysis.FormatBytes(mem.TotalBytes()))
	if err := trainer.Initialize(); err != nil {
		return nil, spec, err
	}
	if _, err := export.Write(trainer, folder, batches, 1); err != nil {
		return nil, spec, err
	}
	return side, spec, nil
}

// compareCompiled compiles one configuration on both sides without training.
func compareCompiled(o compareOptions, r *compareResult, s *setup, config train.Config, batches data.Data, folder string, progress io.Writer) *compareResult {
	fail := func(err error) *compareResult {
		r.Error = err.Error()
		fmt.Fprintf(progress, "compare: %s: %v\n", r.Name, err)
		return r
	}
	ours, spec, err := compileOnegpuSide(s, config, batches, o.hloDir, folder, progress)
	r.Backend = spec.String()
	if err != nil {
		return fail(err)
	}
	r.Ours = ours
	theirs, err := runJAXSide(o, spec, folder, true, progress)
	if err != nil {
		return fail(err)
	}
	r.JAX = theirs
	r.Agree = true // nothing trained: both sides compiled
	return r
}

func compiledMemory(m analysis.CompiledMemory) *compareMemory {
	return &compareMemory{ArgumentBytes: m.ArgumentBytes, OutputBytes: m.OutputBytes, AliasBytes: m.AliasBytes,
		TempBytes: m.TemporaryBytes, CodeBytes: m.CodeBytes, TotalBytes: m.TotalBytes()}
}

// hloDumpDir returns where XLA dumps HLO in this process: XLA reads its flags once, when the first
// plugin client is created, so once one exists the folder its XLA_FLAGS named stays in force (XLA
// creates it again if it was removed). Before that, it is fallback.
func hloDumpDir(fallback string) string {
	if len(flags.PluginsCreated()) == 0 {
		return fallback
	}
	if env, err := flags.Environment(); err == nil {
		if dir, ok := env.Lookup("xla_dump_to"); ok && dir.Value != "" {
			return dir.Value
		}
	}
	return ""
}

// dumpedHLO lists the optimized modules XLA has dumped to dir so far.
func dumpedHLO(dir string) map[string]bool {
	seen := map[string]bool{}
	if dir == "" {
		return seen
	}
	files, _ := analysis.OptimizedHLOFiles(dir)
	for _, f := range files {
		seen[f] = true
	}
	return seen
}

// newCensus counts the newest train step module XLA dumped to dir since before was listed, or
// returns nil (and says why) when there is none.
func newCensus(dir string, before map[string]bool, progress io.Writer) *analysis.HLOCensus {
	if dir == "" {
		return nil
	}
	files, err := analysis.OptimizedHLOFiles(dir)
	var newest string
	for _, f := range files {
		if !before[f] && strings.Contains(filepath.Base(f), train.StepName) {
			newest = f
		}
	}
	if err != nil || newest == "" {
		fmt.Fprintf(progress, "   [onegpu] no HLO census: XLA dumped no new %s module under %s (XLA_FLAGS set before this run?)\n", train.StepName, dir)
		return nil
	}
	c, err := analysis.ReadHLOCensus(newest)
	if err != nil {
		fmt.Fprintf(progress, "   [onegpu] no HLO census: %v\n", err)
		return nil
	}
	return &c
}

// runJAXSide runs the reference on folder and reads its JSON; compileOnly compiles its step without
// training. With an XLA backend and --jax-runtime plugin the reference runs on onegpu's PJRT plugin.
func runJAXSide(o compareOptions, ours platform.BackendSpec, folder string, compileOnly bool, progress io.Writer) (*compareSide, error) {
	hlo := filepath.Join(folder, "jax_step.hlo.txt")
	args := append([]string{o.script, folder, "--accumulate", o.accumulate, "--layer-dtypes", o.layerDTyp, "--hlo", hlo}, o.referenceArgs...)
	if ours.Kind == "xla" && o.jaxRuntime == "plugin" {
		args = append(args, "--pjrt-plugin", ours.Plugin)
	}
	if compileOnly {
		args = append(args, "--compile-only")
	}
	parent := o.signals
	if parent == nil {
		parent = context.Background()
	}
	ctx, cancel := context.WithTimeout(parent, o.jaxTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, o.python, args...)
	cmd.WaitDelay = 5 * time.Second // do not wait on output pipes a killed reference left open
	stdout := &tailBuffer{limit: compareStdoutLimit}
	echo := newBoundedEcho(progress, "   ")
	cmd.Stdout, cmd.Stderr = stdout, echo
	fmt.Fprintf(progress, "   JAX: %s %s\n", o.python, strings.Join(args, " "))
	err := cmd.Run()
	echo.finish()
	switch {
	case parent.Err() != nil:
		return nil, fmt.Errorf("the JAX reference (%s %s) was stopped by a signal", o.python, o.script)
	case ctx.Err() != nil:
		return nil, fmt.Errorf("the JAX reference (%s %s) ran past --jax-timeout %v and was stopped: "+
			"give it more time (--jax-timeout 2h) or fewer --steps", o.python, o.script, o.jaxTimeout)
	case err != nil:
		return nil, fmt.Errorf("the JAX reference (%s %s) failed: %w", o.python, o.script, err)
	}
	// The result is the whole output, or its last line if a library printed something before it.
	var side compareSide
	text := strings.TrimSpace(stdout.String())
	if err := json.Unmarshal([]byte(text), &side); err != nil || stdout.cut() > 0 {
		lastLine := text[strings.LastIndex(text, "\n")+1:]
		if err := json.Unmarshal([]byte(lastLine), &side); err != nil {
			return nil, fmt.Errorf("the JAX reference printed no JSON result (%v): %s", err, quoteTail(stdout.String(), stdout.cut()))
		}
	}
	if err := side.checkSteps(compileOnly); err != nil {
		return nil, fmt.Errorf("the JAX reference's result: %w", err)
	}
	side.MemoryKind = "xla_compiled"
	if c, err := analysis.ReadHLOCensus(hlo); err == nil {
		side.Census = &c
	} else {
		fmt.Fprintf(progress, "   JAX: no HLO census: %v\n", err)
	}
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
