package main

import (
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/onegpu/onegpu/analysis"
	"github.com/onegpu/onegpu/data"
	"github.com/onegpu/onegpu/internal/hostmemory"
	"github.com/onegpu/onegpu/models"
	"github.com/onegpu/onegpu/platform"
	"github.com/onegpu/onegpu/train"
	"github.com/onegpu/onegpu/train/checkpoint"
)

func init() {
	register(command{
		name:    "train",
		summary: "train the tutorial's GPT or MLP with mixed precision, remat and micro-batches, showing the loss",
		run:     func(args []string) error { return runTrain(args, os.Stdout) },
	})
}

func runTrain(args []string, w io.Writer) (err error) {
	defer inFlags(&err)
	fs := newFlagSet("train", "[--model gpt|mlp] [--preset P] [--policy S] [--remat SPEC] [--microbatches K] [--offload none|optimizer|params] [--budget BYTES] [--steps N] [--data text|synthetic|FILE.npy|FILE.txt|FILE.jsonl|DIR] [--tokenizer DIR] [--template T] [--eval-split S|--eval-data FILE] [--eval-every N] [--init-hf DIR] [--export-hf DIR [--merge]] [--lora SPEC [--quantize-base nf4|int8] [--base-dtype D]] [--init-adapter DIR] [--export-adapter DIR] [--checkpoint DIR] [--save-every N] [--keep N] [--overwrite] [--allow-other-data] [--plot FILE.png] [--json]")
	var s setup
	s.register(fs, "gpt", "tiny")
	steps := fs.Int("steps", 60, "train up to this global step (a resumed run continues from its checkpoint)")
	dataName := fs.String("data", "text", "a language model's data: text (byte-level Genesis and Exodus, shipped with onegpu), synthetic (the tutorial's fixed random batch),\n"+
		"FILE.npy (token ids [sequences, length], int32 or int64, cut into windows of the sequence length + 1), or text of your own:\n"+
		"FILE.txt (one document, or several with --separator), a folder of .txt files (one document each) or FILE.jsonl (one record a line:\n"+
		"{\"text\": ...}, {\"prompt\": ..., \"completion\": ...} or {\"messages\": [...]} with --template), tokenized with --tokenizer and packed\n"+
		"into sequences of --seq tokens (attention within each document; prompts and other roles' messages carry no loss)")
	var textFlags textRun
	textFlags.register(fs)
	var hfFlags hfRun
	hfFlags.register(fs)
	var adapterFlags adapterRun
	adapterFlags.register(fs)
	checkpointDir := fs.String("checkpoint", "", "folder to resume from and save checkpoints to, locked while the run lasts (default: no checkpoints). On resume the model,\nsizes, vocabulary, policy, optimizer, loss scale, batch, seed and dropout must match the checkpoint's; steps, micro-batches, --lr, remat and backend may change.\n"+
		"With --lora the checkpoints hold the adapters and the base's SHA-256, not the base: resume with the same --init-hf (or seed) and --base-dtype")
	saveEvery := fs.Int("save-every", 0, "with --checkpoint, save every N steps, at the end and when interrupted (default: steps/4, at least 1)")
	keep := fs.Int("keep", 2, "with --checkpoint, keep the newest N whole checkpoints")
	overwrite := fs.Bool("overwrite", false, "with --checkpoint, train in a folder that holds weights no whole onegpu checkpoint accounts for\n(someone's files, or checkpoints whose .json or manifest was removed): they are kept, never deleted;\nwith --export-hf or --export-adapter, export into a folder that holds files onegpu did not export (a model\nor adapter someone saved): its config.json and weights (or adapter files) are replaced, other weights files removed")
	allowOtherData := fs.Bool("allow-other-data", false, "with --checkpoint, resume from a checkpoint trained on other --data (the checkpoints record the data: its content hash or parameters)")
	logEvery := fs.Int("log-every", 0, "print a progress line every N steps, at least 1 (default: 20 lines per run)")
	plotFile := fs.String("plot", "", "write the loss curve to this PNG file, not a file the run reads (default: no plot)")
	budgetText := fs.String("budget", "", "with --offload params, the most device memory the streamed step may use at once, e.g. 8GiB: each stage program's memory by XLA's account\nplus the buffers the step keeps on the device; a step that needs more stops with an error (default: no limit)")
	asJSON := fs.Bool("json", false, "print the run's history as one JSON object instead of progress lines (a non-finite loss is written as the string \"NaN\", \"+Inf\" or \"-Inf\")")
	if err := parseArgs(fs, args); err != nil {
		return err
	}
	if *steps < 1 {
		return fmt.Errorf("--steps %d: train at least one step", *steps)
	}
	set := given(fs)
	if err := atLeast(set, "log-every", *logEvery, 1); err != nil {
		return err
	}
	for _, f := range []struct {
		name  string
		value int
	}{{"save-every", *saveEvery}, {"keep", *keep}} {
		if err := atLeast(set, f.name, f.value, 1); err != nil {
			return err
		}
	}
	if *checkpointDir == "" {
		if err := notApplicable(set, "it needs --checkpoint DIR", "save-every", "keep", "allow-other-data"); err != nil {
			return err
		}
		if hfFlags.exportDir == "" && adapterFlags.exportDir == "" {
			if err := notApplicable(set, "it needs --checkpoint DIR, --export-hf DIR or --export-adapter DIR", "overwrite"); err != nil {
				return err
			}
		}
	}
	if !set["save-every"] {
		*saveEvery = max(1, *steps/4)
	}
	if err := hfFlags.prepare(&s, set); err != nil {
		return err
	}
	if err := adapterFlags.prepare(&s, set); err != nil {
		return err
	}
	config, err := s.config()
	if err != nil {
		return err
	}
	hfFlags.overwrite, hfFlags.checkpointDir = *overwrite, *checkpointDir
	if err := hfFlags.check(config); err != nil {
		return err
	}
	if err := adapterFlags.check(config, &hfFlags); err != nil {
		return err
	}
	if *budgetText != "" {
		if config.DeviceBudget, err = parseBytes(*budgetText); err != nil {
			return fmt.Errorf("--budget %s: %w", *budgetText, err)
		}
		if config.DeviceBudget < 1 {
			return fmt.Errorf("--budget %s: give a positive size, e.g. 8GiB", *budgetText)
		}
		if err := config.Validate(); err != nil {
			return err
		}
	}
	if _, ok := config.Model.(train.LanguageModel); !ok {
		if err := notApplicable(set, fmt.Sprintf("the %s trains on its own batch; --data chooses a language model's", s.model), "data"); err != nil {
			return err
		}
	}
	if err := textFlags.prepare(&config, *dataName, hfFlags.initDir, set); err != nil {
		return err
	}
	var progress io.Writer = flagWriter{w}
	if *asJSON {
		progress = nil
	}
	// Everything that can refuse the run does so before any work: output paths, the checkpoint
	// folder (lock, damage, config), memory.
	if *plotFile != "" {
		if err := checkOutputFile("plot", *plotFile); err != nil {
			return err
		}
		reads := map[string]string{"init-hf": hfFlags.initDir, "init-adapter": adapterFlags.initDir, "tokenizer": textFlags.tokenizerDir,
			"checkpoint": *checkpointDir, "eval-data": textFlags.evalData}
		if *dataName != "text" && *dataName != "synthetic" {
			reads["data"] = *dataName
		}
		if err := checkNotRead("plot", *plotFile, reads); err != nil {
			return err
		}
	}
	var store *checkpoint.Folder
	if *checkpointDir != "" {
		if err := checkOutputFolder("checkpoint", *checkpointDir); err != nil {
			return err
		}
		if store, err = train.OpenCheckpointsWith(*checkpointDir, config, checkpoint.Options{Keep: *keep, Overwrite: *overwrite}); err != nil {
			return err
		}
		defer store.Close()
	}
	// Text is read and tokenized before the step compiles: its errors come first.
	var batches data.Data
	var text, evalText *data.Packed
	if textFlags.text {
		if text, evalText, err = textFlags.read(config, *dataName, *checkpointDir, progress); err != nil {
			return err
		}
		batches = text
	}
	backend, spec, err := s.newBackend()
	if err != nil {
		return err
	}
	defer backend.Finalize()
	trainer, err := train.New(backend, config)
	if err != nil {
		return err
	}
	defer trainer.Close()
	if err := checkMemory(trainer, spec); err != nil {
		return err
	}
	if batches == nil {
		if batches, err = batchData(config, *dataName); err != nil {
			return err
		}
	}
	if progress != nil {
		fmt.Fprintf(w, "%s\nbackend %s\n", describe(config), spec)
		for _, d := range []*data.Packed{text, evalText} {
			if d != nil {
				fmt.Fprintln(w, d.Summary())
			}
		}
	}
	// The adapters first: a LoRA run's base is made as --init-hf is read (train.Trainer.SetBase).
	if err := adapterFlags.load(trainer, store, progress); err != nil {
		return err
	}
	if err := hfFlags.load(trainer, store, progress); err != nil {
		return err
	}
	stop, stopped := stopOnSignal(os.Stderr)
	defer stopped()
	opts := train.RunOptions{Steps: *steps, Progress: progress, LogEvery: *logEvery, Checkpoints: store, SaveEvery: *saveEvery, Stop: stop,
		AllowOtherData: *allowOtherData, EvalEvery: textFlags.evalEvery}
	if evalText != nil {
		opts.Eval = evalText
	}
	history, runErr := trainer.Run(batches, opts)
	if history == nil {
		return runErr
	}
	if runErr == nil {
		runErr = adapterFlags.export(trainer, progress)
	}
	if runErr == nil {
		runErr = hfFlags.export(trainer, progress)
	}
	// The history is written whatever happened, before the error, so a late failure (the plot's
	// too) loses nothing.
	if *plotFile != "" && len(history.Steps) > 0 {
		if err := plotLoss(*plotFile, title(config), finiteSteps(history)); err != nil {
			runErr = errors.Join(runErr, err)
			*plotFile = ""
		}
	}
	if *asJSON {
		out := struct {
			Config   string            `json:"config"`
			Backend  string            `json:"backend"`
			Error    string            `json:"error,omitempty"`
			Data     *data.PackedStats `json:"data,omitempty"`
			EvalData *data.PackedStats `json:"eval_data,omitempty"`
			*train.History
		}{Config: describe(config), Backend: spec.String(), History: history, Data: text.Stats(), EvalData: evalText.Stats()}
		if runErr != nil {
			out.Error = runErr.Error()
		}
		if err := writeJSON(w, out); err != nil {
			return errors.Join(runErr, err)
		}
		return runErr
	}
	history.WriteSummary(w)
	if *plotFile != "" && len(history.Steps) > 0 {
		fmt.Fprintf(w, "%-22s %s\n", "loss curve", *plotFile)
	}
	return runErr
}

// stopOnSignal returns a channel closed at the first SIGINT or SIGTERM, so that the run can save
// and stop after its current step; a second signal ends the process as usual. done releases the
// signals.
func stopOnSignal(w io.Writer) (stop <-chan struct{}, done func()) {
	signals := make(chan os.Signal, 1)
	signal.Notify(signals, os.Interrupt, syscall.SIGTERM)
	ch := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		select {
		case sig := <-signals:
			signal.Stop(signals) // a second Ctrl-C kills
			fmt.Fprintf(w, "\n%s: finishing the current step and saving (again to quit at once)\n", sig)
			close(ch)
		case <-finished:
		}
	}()
	return ch, func() {
		signal.Stop(signals)
		close(finished)
	}
}

// finiteSteps drops the steps whose loss is not finite, which a plot cannot draw.
func finiteSteps(h *train.History) *train.History {
	out := *h
	out.Steps = nil
	for _, s := range h.Steps {
		if !math.IsNaN(s.Loss) && !math.IsInf(s.Loss, 0) {
			out.Steps = append(out.Steps, s)
		}
	}
	return &out
}

// checkMemory refuses a step whose estimated peak (analysis.Analyze of the train step, what `onegpu
// memory` prints) plus its data does not fit in the memory the backend has: the machine's
// available RAM for the embedded backend. On XLA only the data is compared with the host's RAM:
// the device's free memory is not known before the client allocates.
func checkMemory(t *train.Trainer, spec platform.BackendSpec) error {
	available, ok := availableRAM()
	if !ok {
		return nil
	}
	// First what the config says without building anything: the parameters live in this
	// machine's memory on the embedded backend, and with --offload on XLA.
	if params, ok := paramsOf(t.Config.Model); ok && (spec.Kind != "xla" || t.Config.Offload != train.OffloadNone) {
		if weights := params * int64(t.Config.Policy.Param.Size()); weights > available {
			return fmt.Errorf("the model's %s parameters alone need %s in %s, this machine has %s available: it would run out of memory; choose a smaller model",
				groupDigits(params), analysis.FormatBytes(weights), strings.ToLower(t.Config.Policy.Param.String()), analysis.FormatBytes(available))
		}
	}
	need, dataBytes, err := stepBytes(t)
	if err != nil {
		return err
	}
	if spec.Kind == "xla" {
		need = dataBytes
	}
	if need <= available {
		return nil
	}
	return fmt.Errorf("the step needs about %s (%s of it data), this machine has %s available: it would run out of memory; %s",
		analysis.FormatBytes(need), analysis.FormatBytes(dataBytes), analysis.FormatBytes(available), fittingFlags(t, need, available))
}

// paramsOf returns the parameter count of a model whose config says it (models.Llama,
// models.GPT), without building anything.
func paramsOf(m train.Model) (int64, bool) {
	switch m := m.(type) {
	case models.Llama:
		return m.Config.Params(), true
	case models.GPT:
		return m.Config.Params(), true
	}
	return 0, false
}

// stepBytes returns the step's estimated peak memory plus its data, and the data alone.
func stepBytes(t *train.Trainer) (total, dataBytes int64, err error) {
	p, err := t.Program()
	if err != nil {
		return 0, 0, err
	}
	defer p.Graph.Finalize()
	m := analysis.Analyze(p)
	for _, s := range t.InputShapes() { // one batch
		dataBytes += int64(s.Memory())
	}
	return m.PeakBytes + dataBytes, dataBytes, nil
}

// fittingFlags suggests the largest batch that fits, from the estimates of the config (need) and
// of half its batch: memory grows linearly with the batch.
func fittingFlags(t *train.Trainer, need, available int64) string {
	const none = "even the smallest batch does not fit: choose a smaller --preset or a backend with more memory"
	c := t.Config
	half := c
	half.Batch = max(c.MicroBatches, c.Batch/2/c.MicroBatches*c.MicroBatches)
	if half.Batch == c.Batch {
		return none
	}
	smaller, err := train.New(t.Backend, half)
	if err != nil {
		return none
	}
	halfNeed, _, err := stepBytes(smaller)
	if err != nil {
		return none
	}
	perExample := float64(need-halfNeed) / float64(c.Batch-half.Batch)
	fixed := float64(halfNeed) - perExample*float64(half.Batch)
	if perExample <= 0 || fixed >= float64(available) {
		return none
	}
	batch := int((0.9*float64(available)-fixed)/perExample) / c.MicroBatches * c.MicroBatches
	if batch < c.MicroBatches {
		return none
	}
	return fmt.Sprintf("flags that fit: --batch %d (--microbatches %d); more micro-batches or --remat block shrink the activations further", batch, c.MicroBatches)
}

// availableRAM is the memory this machine can give the run (MemAvailable); ok is false where the
// system does not say.
func availableRAM() (bytes int64, ok bool) {
	available, err := hostmemory.Available()
	return available, err == nil
}
