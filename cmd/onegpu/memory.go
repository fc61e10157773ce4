package main

import (
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/ml/context"

	"github.com/onegpu/onegpu/analysis"
	"github.com/onegpu/onegpu/audit"
	"github.com/onegpu/onegpu/flags"
	"github.com/onegpu/onegpu/platform"
	"github.com/onegpu/onegpu/recipes"
	"github.com/onegpu/onegpu/remat"
	"github.com/onegpu/onegpu/train"
	"github.com/onegpu/onegpu/vjp"
)

func init() {
	register(command{
		name:    "memory",
		summary: "estimate a train step's peak memory, what is alive at the peak, and its FLOPs, without running it",
		run:     func(args []string) error { return runMemory(args, os.Stdout) },
	})
}

// memoryOptions are the choices of `onegpu memory`.
type memoryOptions struct {
	setup
	stockGradients bool
	// layers, when positive, replaces the preset's number of layers (--layers).
	layers         int
	asJSON         bool
	dumpHLO        string
	residualDetail bool
	timeline       string
}

func runMemory(args []string, w io.Writer) (err error) {
	defer inFlags(&err)
	fs := newFlagSet("memory", "[--model mlp|gpt|llama] [--preset P] [--policy S] [--remat SPEC] [--microbatches K] [--stock-gradients] [--backend SPEC] [--dump-hlo DIR] [--json]")
	var o memoryOptions
	o.setup.register(fs, "mlp", "tutorial")
	fs.BoolVar(&o.stockGradients, "stock-gradients", false, "build the gradients with GoMLX v0.26.0's own rules, for comparison")
	fs.IntVar(&o.layers, "layers", 0, "build the model with this many layers instead of its preset's, the rest the same: a depth-reduced model, e.g. to compile\n"+
		"with XLA what would take long at full depth (memory and FLOPs grow affinely with depth: m(L) = m(1) + (L-1)·(m(2) - m(1))) (default: the preset's)")
	fs.BoolVar(&o.asJSON, "json", false, "print one JSON object")
	fs.StringVar(&o.dumpHLO, "dump-hlo", "", "with an XLA backend, write the step's HLO before and after XLA's optimizations to this folder (default: none)")
	fs.BoolVar(&o.residualDetail, "residuals", false, "gpt only: list every value the backward pass keeps from each block (default: one line per block)")
	fs.StringVar(&o.timeline, "timeline", "", "write live memory over the step's schedule to this PNG file, one band per block (forward, the loss, backward, the update), "+
		"attention and the loss in their own colors (default: no plot)")
	var sf streamFlags
	sf.register(fs)
	budgetText := fs.String("budget", "", "with --offload params: the device memory to fit, e.g. 24GiB (default: none; the report says what fits)")
	if err := parseArgs(fs, args); err != nil {
		return err
	}
	set := given(fs)
	if o.offload == "params" {
		return memoryStreamed(w, &o, &sf, set, *budgetText)
	}
	if err := sf.notApplicable(set, "nothing streams: they size a streamed run (--offload params)"); err != nil {
		return err
	}
	if err := notApplicable(set, "memory reports a step's peak; --budget sizes a streamed run (--offload params) against the device (plan answers what fits a budget)", "budget"); err != nil {
		return err
	}
	if o.model == "mlp" {
		if err := notApplicable(set, "the MLP has no blocks whose residuals to list; use --model gpt", "residuals"); err != nil {
			return err
		}
	}
	if err := notApplicable(set, "memory builds the step without running it: no learning rate or seed changes what it allocates", "lr", "seed"); err != nil {
		return err
	}
	if o.timeline != "" {
		if err := checkOutputFile("timeline", o.timeline); err != nil {
			return err
		}
	}
	report, err := analyzeMemory(o)
	if err != nil {
		return err
	}
	if o.timeline != "" {
		if _, err := plotTimeline(o.timeline, "a train step's memory: "+report.title, report.Timeline, report.steps); err != nil {
			return err
		}
		report.TimelineFile = o.timeline
	}
	if o.asJSON {
		return writeJSON(w, report)
	}
	report.writeText(w)
	return nil
}

// memoryReport is what `onegpu memory` prints.
type memoryReport struct {
	Backend       string           `json:"backend"`
	Model         string           `json:"model"`
	Policy        string           `json:"policy"`
	Remat         string           `json:"remat"`
	Optimizer     string           `json:"optimizer"`
	Offload       string           `json:"offload"`
	MicroBatches  int              `json:"microbatches"`
	Batch         int              `json:"batch"`
	Gradients     string           `json:"gradients"`
	Params        int64            `json:"params"`
	ArgumentBytes int64            `json:"argument_bytes"`
	PeakBytes     int64            `json:"peak_bytes"`
	PeakTempBytes int64            `json:"peak_temp_bytes"`
	PeakAt        string           `json:"peak_at"`
	FLOPs         int64            `json:"flops"`
	MatmulFLOPs   int64            `json:"matmul_flops"`
	Breakdown     map[string]int64 `json:"breakdown_at_peak"`
	Largest       []tensorJSON     `json:"largest_at_peak"`
	// DTypeFindings are the audit's findings grouped (audit.GroupFindings), one line a group;
	// DTypeFindingCount counts the findings.
	DTypeFindings     []string      `json:"dtype_findings"`
	DTypeFindingCount int           `json:"dtype_finding_count"`
	ExecutedNodes     int           `json:"executed_nodes"`
	XLA               *compiledJSON `json:"xla_compiled,omitempty"`
	Residuals         *remat.Report `json:"remat_residuals,omitempty"`
	Devices           *devicesJSON  `json:"devices,omitempty"`
	// Host is what host memory holds with the optimizer offloaded; the rest of the report is then
	// the device's step.
	Host *hostJSON `json:"host,omitempty"`
	// EmbeddingOnHost says that the input embedding table stays in host memory and the device gets
	// each batch's rows (a LoRA run with an untied table: train.Trainer.EmbeddingOnHost).
	EmbeddingOnHost bool    `json:"embedding_on_host,omitempty"`
	Timeline        []int64 `json:"-"`
	// TimelineBlocks are the step's ops grouped into runs of one block (a remat block, its
	// recomputation, the loss, ...), with each run's peak: the timeline's outline.
	TimelineBlocks []timelineBlock `json:"timeline_blocks"`
	// TimelineFile is the plot --timeline wrote.
	TimelineFile    string `json:"timeline_file,omitempty"`
	steps           []analysis.Step
	title           string
	breakdownByKind map[analysis.Kind]int64
	residualDetail  bool
}

type tensorJSON struct {
	Label string `json:"label"`
	Shape string `json:"shape"`
	Kind  string `json:"kind"`
	Bytes int64  `json:"bytes"`
}

// analyzeMemory builds the chosen train step (forward, backward, Adam update) and analyzes it.
func analyzeMemory(o memoryOptions) (*memoryReport, error) {
	config, err := o.config()
	if err != nil {
		return nil, err
	}
	if o.layers != 0 {
		family, err := recipes.Lookup(o.model)
		if err != nil {
			return nil, err
		}
		if family.WithLayers == nil {
			return nil, fmt.Errorf("--layers %d: the %s has no layers to count", o.layers, o.model)
		}
		if o.layers < 1 {
			return nil, fmt.Errorf("--layers %d: build at least 1 layer", o.layers)
		}
		if config.Model, err = family.WithLayers(config.Model, o.layers); err != nil {
			return nil, fmt.Errorf("--layers %d: %w", o.layers, err)
		}
		if err := config.Validate(); err != nil {
			return nil, err
		}
	}
	spec, err := platform.ResolveBackend(o.backend)
	if err != nil {
		return nil, err
	}
	if o.dumpHLO != "" && spec.Kind != "xla" {
		return nil, fmt.Errorf("--dump-hlo needs an XLA backend (--backend xla:/abs/path/plugin.so); the embedded backend has no HLO")
	}
	hloDir := o.dumpHLO
	if spec.Kind == "xla" {
		if hloDir == "" && len(flags.PluginsCreated()) > 0 {
			hloDir = hloDumpDir("")
		} else if hloDir == "" { // the census reads the optimized module XLA dumps
			if hloDir, err = os.MkdirTemp("", "onegpu-hlo-"); err != nil {
				return nil, err
			}
			defer os.RemoveAll(hloDir)
		}
		if hloDir != "" {
			o.xlaPresets = append(o.xlaPresets, flags.Dump(hloDir, stepName, ""))
		}
	}
	backend, spec, err := o.newBackend()
	if err != nil {
		return nil, err
	}
	defer backend.Finalize()
	trainer, err := train.New(backend, config)
	if err != nil {
		return nil, err
	}
	step := trainer.DeviceStepFn()
	if o.stockGradients {
		step = withStockGradients(step)
	}
	ctx := context.New()
	p, err := analysis.ContextProgram(backend, ctx, stepName, trainer.StepShapes(), step)
	if err != nil {
		return nil, err
	}
	defer p.Graph.Finalize()
	m := analysis.Analyze(p)
	r := &memoryReport{Optimizer: o.optimizer, title: title(config), Offload: config.Offload.String(),
		Backend: spec.String(), Model: describe(config), Policy: config.Policy.String(), Remat: config.Remat.String(),
		MicroBatches: config.MicroBatches, Batch: config.Batch, Gradients: "onegpu", residualDetail: o.residualDetail, ArgumentBytes: m.ArgumentBytes, PeakBytes: m.PeakBytes,
		PeakTempBytes: m.PeakTempBytes, FLOPs: m.FLOPs, MatmulFLOPs: m.MatmulFLOPs,
		Breakdown: map[string]int64{}, breakdownByKind: map[analysis.Kind]int64{}, ExecutedNodes: m.ExecutedNodes, Timeline: m.Timeline, steps: m.Steps,
		TimelineBlocks: timelineBlocks(m.Timeline, m.Steps),
	}
	if o.stockGradients {
		r.Gradients = "GoMLX v0.26.0 stock rules"
	}
	if m.PeakAt != nil {
		r.PeakAt = fmt.Sprintf("%s #%d %s", m.PeakAt.Type(), m.PeakAt.Id(), m.PeakAt.Shape())
		for _, s := range m.Steps {
			if s.Node == m.PeakAt.Id() {
				r.PeakAt += " in " + s.Block
				if s.Section != s.Block {
					r.PeakAt += " (" + s.Section + ")"
				}
			}
		}
	}
	for _, n := range p.Graph.Nodes() {
		if p.Trainable[n.Id()] {
			r.Params += int64(n.Shape().Size())
		}
	}
	for _, k := range analysis.Kinds() {
		r.breakdownByKind[k] = m.Breakdown[k]
	}
	r.Breakdown = breakdownJSON(r.breakdownByKind)
	for _, t := range m.AtPeak {
		r.Largest = append(r.Largest, tensorJSON{Label: t.Label(), Shape: t.Node.Shape().String(), Kind: t.Kind.String(), Bytes: t.Bytes})
	}
	r.DTypeFindings = []string{}
	findings := audit.Graph(p.Graph, p.Outputs)
	r.DTypeFindingCount = len(findings)
	for _, g := range audit.GroupFindings(findings) {
		r.DTypeFindings = append(r.DTypeFindings, g.String())
	}
	if kinds, ok := config.Model.(interface{ RematKinds() []string }); ok && len(kinds.RematKinds()) > 0 {
		report, err := remat.Residuals(p)
		if err != nil {
			return nil, err
		}
		r.Residuals = &report
	}
	if spec.Kind == "xla" {
		dumped := dumpedHLO(hloDir)
		compiled, err := analysis.CompileProgram(p)
		if err != nil {
			return nil, err
		}
		r.XLA = &compiledJSON{ArgumentBytes: compiled.ArgumentBytes, OutputBytes: compiled.OutputBytes,
			AliasBytes: compiled.AliasBytes, TemporaryBytes: compiled.TemporaryBytes, CodeBytes: compiled.CodeBytes,
			TotalBytes: compiled.TotalBytes(), HLODir: o.dumpHLO, Census: newCensus(hloDir, dumped, os.Stderr)}
	}
	r.EmbeddingOnHost = trainer.EmbeddingOnHost()
	if config.Offload == train.OffloadOptimizer {
		if r.Host, err = analyzeHost(trainer, ctx); err != nil {
			return nil, err
		}
	}
	if config.Devices.Distributed() {
		if err := r.addDevices(trainer); err != nil {
			return nil, err
		}
	}
	return r, nil
}

// hostJSON is what host memory holds when the optimizer is offloaded: the parameters (the master
// copy the update reads and writes), the gradients it receives, the optimizer's state, and the
// peak of the update program (all of them together with its temporaries).
type hostJSON struct {
	Parameters     int64 `json:"parameters"`
	Gradients      int64 `json:"gradients"`
	OptimizerState int64 `json:"optimizer_state"`
	PeakBytes      int64 `json:"peak_bytes"`
}

// analyzeHost builds the offloaded update on the embedded backend in ctx, where the device's step
// was built, and accounts for what it holds.
func analyzeHost(trainer *train.Trainer, ctx *context.Context) (*hostJSON, error) {
	host, err := platform.NewBackend("go")
	if err != nil {
		return nil, err
	}
	defer host.Finalize()
	p, err := trainer.HostUpdateProgram(host, ctx)
	if err != nil {
		return nil, err
	}
	defer p.Graph.Finalize()
	h := &hostJSON{PeakBytes: analysis.Analyze(p).PeakBytes}
	for _, n := range p.Graph.Nodes() {
		if n.Type() != graph.NodeTypeParameter {
			continue
		}
		bytes := int64(n.Shape().Memory())
		switch {
		case p.Trainable[n.Id()]:
			h.Parameters += bytes
		case p.State[n.Id()]:
			if n.Shape().Rank() > 0 { // not the step counters, learning rate or loss scale
				h.OptimizerState += bytes
			}
		case n.Shape().Rank() > 0:
			h.Gradients += bytes
		}
	}
	return h, nil
}

// stepName names the analyzed train step's graph (and XLA's HLO module).
const stepName = "train_step"

// compiledJSON is XLA's memory account of the compiled step.
type compiledJSON struct {
	ArgumentBytes  int64  `json:"argument_bytes"`
	OutputBytes    int64  `json:"output_bytes"`
	AliasBytes     int64  `json:"alias_bytes"`
	TemporaryBytes int64  `json:"temporary_bytes"`
	CodeBytes      int64  `json:"code_bytes"`
	TotalBytes     int64  `json:"total_bytes"`
	HLODir         string `json:"hlo_dir,omitempty"`
	// Census counts the optimized HLO by op and element type.
	Census *analysis.HLOCensus `json:"census,omitempty"`
}

func (r *memoryReport) writeText(w io.Writer) {
	fmt.Fprintf(w, "train step (%s) of the %s; %s gradient rules\n", r.Optimizer, r.Model, r.Gradients)
	if r.Host != nil {
		fmt.Fprintln(w, "optimizer offloaded to the host: what follows is the device's step (loss and gradients); the host's part is at the end")
	}
	fmt.Fprintf(w, "backend %s\n", r.Backend)
	fmt.Fprintf(w, "(estimate: the embedded backend's sequential execution; with XLA, XLA's own account follows)\n\n")
	fmt.Fprintf(w, "parameters      %s\n", groupDigits(r.Params))
	if r.EmbeddingOnHost {
		fmt.Fprintf(w, "input embedding in host memory: the host gathers each batch's rows, the device gets them (not the table)\n")
	}
	fmt.Fprintf(w, "peak memory     %s = %s of inputs (weights, optimizer state, batch) + %s allocated by the step\n",
		analysis.FormatBytes(r.PeakBytes), analysis.FormatBytes(r.ArgumentBytes), analysis.FormatBytes(r.PeakTempBytes))
	fmt.Fprintf(w, "peak reached at %s\n", r.PeakAt)
	fmt.Fprintf(w, "FLOPs per step  %s (matmuls %.1f%%), %d ops executed\n", humanCount(r.FLOPs),
		100*float64(r.MatmulFLOPs)/float64(max(r.FLOPs, 1)), r.ExecutedNodes)
	fmt.Fprintf(w, "memory over the step (%s max): %s\n", analysis.FormatBytes(r.PeakBytes), sparkline(r.Timeline, 64))
	if r.TimelineFile != "" {
		fmt.Fprintf(w, "timeline plot:  %s\n", r.TimelineFile)
	}
	if x := r.XLA; x != nil {
		fmt.Fprintf(w, "XLA compiled    %s = arguments %s + outputs %s - aliased %s + temporary %s + code %s\n",
			analysis.FormatBytes(x.TotalBytes), analysis.FormatBytes(x.ArgumentBytes), analysis.FormatBytes(x.OutputBytes), analysis.FormatBytes(x.AliasBytes),
			analysis.FormatBytes(x.TemporaryBytes), analysis.FormatBytes(x.CodeBytes))
		if x.HLODir != "" {
			fmt.Fprintf(w, "HLO written to  %s (*%s*after_optimizations.txt is what runs)\n", x.HLODir, stepName)
		}
		if c := x.Census; c != nil {
			fmt.Fprintf(w, "optimized HLO   %d instructions:", c.Instructions)
			for i, k := range analysis.CensusRows(*c) {
				if i%4 == 0 {
					fmt.Fprintf(w, "\n               ")
				}
				fmt.Fprintf(w, " %s %d;", k, c.Ops[k])
			}
			fmt.Fprintln(w)
		}
	}
	fmt.Fprintln(w)
	r.Devices.writeText(w)

	fmt.Fprintln(w, "at the peak, by kind:")
	var atPeak int64 // the peak, or one device's share of it
	for _, b := range r.breakdownByKind {
		atPeak += b
	}
	for _, k := range shownKinds(r.breakdownByKind) {
		b := r.breakdownByKind[k]
		fmt.Fprintf(w, "  %-16s %10s  %5.1f%%  %s\n", k, analysis.FormatBytes(b), 100*float64(b)/float64(max(atPeak, 1)),
			strings.Repeat("█", int(40*b/max(atPeak, 1))))
	}
	if h := r.Host; h != nil {
		fmt.Fprintln(w, "\nin host memory (the offloaded optimizer; per step the parameters go to the device and the gradients come back):")
		for _, row := range []struct {
			name  string
			bytes int64
		}{{"parameters", h.Parameters}, {"gradients", h.Gradients}, {"optimizer_state", h.OptimizerState}, {"update peak", h.PeakBytes}} {
			fmt.Fprintf(w, "  %-16s %10s\n", row.name, analysis.FormatBytes(row.bytes))
		}
	}
	fmt.Fprintln(w, "\nlargest buffers alive at the peak:")
	fmt.Fprintf(w, "  %-22s %-28s %-16s %10s\n", "value", "shape", "kind", "bytes")
	for _, t := range r.Largest {
		fmt.Fprintf(w, "  %-22s %-28s %-16s %10s\n", t.Label, t.Shape, t.Kind, analysis.FormatBytes(t.Bytes))
	}
	if r.Residuals != nil {
		fmt.Fprintf(w, "\nwhat the backward pass keeps from each block's forward pass (remat %s):\n", r.Remat)
		if r.residualDetail {
			r.Residuals.WriteTable(w)
		} else {
			r.Residuals.WriteSummary(w)
		}
	}
	if len(r.DTypeFindings) > 0 {
		fmt.Fprintf(w, "\ndtype audit: %s in %s\n", plural(r.DTypeFindingCount, "finding"), plural(len(r.DTypeFindings), "group"))
		const shown = 12 // a summary, not a listing: --json has every group
		for _, f := range r.DTypeFindings[:min(shown, len(r.DTypeFindings))] {
			fmt.Fprintf(w, "  %s\n", f)
		}
		if more := len(r.DTypeFindings) - shown; more > 0 {
			fmt.Fprintf(w, "  ... and %d more (--json lists every group)\n", more)
		}
	}
}

// shownKinds are the kinds a report shows of breakdown: all but frozen weights, which only the runs
// that have them (adapters on a frozen base) show.
func shownKinds(breakdown map[analysis.Kind]int64) []analysis.Kind {
	var kinds []analysis.Kind
	for _, k := range analysis.Kinds() {
		if k != analysis.FrozenWeights || breakdown[k] != 0 {
			kinds = append(kinds, k)
		}
	}
	return kinds
}

// breakdownJSON is breakdown by the names of the kinds shown (shownKinds).
func breakdownJSON(breakdown map[analysis.Kind]int64) map[string]int64 {
	out := map[string]int64{}
	for _, k := range shownKinds(breakdown) {
		out[k.String()] = breakdown[k]
	}
	return out
}

// withStockGradients makes a step build its gradients with GoMLX's own rules.
func withStockGradients(step func(*context.Context, []*graph.Node) []*graph.Node) func(*context.Context, []*graph.Node) []*graph.Node {
	return func(ctx *context.Context, inputs []*graph.Node) []*graph.Node {
		vjp.UseStock(inputs[0].Graph())
		return step(ctx, inputs)
	}
}
