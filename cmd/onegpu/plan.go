package main

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"strconv"
	"strings"

	"github.com/gomlx/gomlx/backends"

	"github.com/onegpu/onegpu/analysis"
	"github.com/onegpu/onegpu/models"
	"github.com/onegpu/onegpu/plan"
	"github.com/onegpu/onegpu/train"
)

func init() {
	register(command{
		name:    "plan",
		summary: "without running anything, find the fastest configuration whose memory fits a budget",
		run:     func(args []string) error { return runPlan(args, os.Stdout) },
	})
}

func runPlan(args []string, w io.Writer) (err error) {
	defer inFlags(&err)
	fs := newFlagSet("plan", "--budget 24GiB [--preset P] [--devices N] [--tflops-f32 T] [--tflops-bf16 T] [--json]")
	var s setup
	s.register(fs, "gpt", "tutorial")
	budgetText := fs.String("budget", "24GiB", "device memory available for the train step, e.g. 24GiB, 80GB, 16000MiB; at most 8EiB")
	tflopsF32 := fs.Float64("tflops-f32", plan.A5000.Float32, "assumed float32 throughput in TFLOP/s (default: an RTX A5000, the tutorial's 24 GB GPU)")
	tflopsBF16 := fs.Float64("tflops-bf16", plan.A5000.BFloat16, "assumed bfloat16 tensor-core throughput in TFLOP/s")
	asJSON := fs.Bool("json", false, "print the plan as one JSON object")
	largest := fs.Bool("largest", false, "instead of planning --preset, find the largest GPT of the tutorial's shape (scaled in layers and hidden size) whose step fits the budget, with the tutorial's techniques and with 8-bit Adam + optimizer offload")
	longest := fs.Bool("longest", false, "instead of planning the preset's sequence, find the longest sequence (in multiples of 128 tokens) whose step fits the budget, "+
		"with plain and chunked attention and cross-entropy unless --attention/--cross-entropy fix them; one sequence per micro-batch, bf16 compute and remat of whole blocks unless --batch, --microbatches, --policy, --remat say otherwise")
	var sf streamFlags
	sf.register(fs)
	if err := parseArgs(fs, args); err != nil {
		return err
	}
	set := given(fs)
	streamed := s.offload == "params"
	if !streamed && !*largest {
		if err := sf.notApplicable(set, "nothing streams: they size a streamed run (--offload params) or plan --largest's streamed rows"); err != nil {
			return err
		}
	}
	if streamed {
		if *longest {
			return fmt.Errorf("--offload params with --longest: --longest plans a step on the device; plan --largest searches the streamed models (its streamed rows)")
		}
		if *largest { // its streamed rows answer it, next to the device's
			s.offload, streamed = "none", false
			delete(set, "offload")
		}
	}
	if *longest {
		return planLongest(w, &s, set, *budgetText, *asJSON)
	}
	if !streamed {
		if err := notApplicable(set, "the plan tries every compute precision, remat choice and micro-batch count itself", "policy", "remat", "microbatches"); err != nil {
			return err
		}
	}
	if err := notApplicable(set, "the plan estimates memory and time; it trains nothing", "lr", "seed"); err != nil {
		return err
	}
	if err := notApplicable(set, "with --devices N the plan tries every shard mode itself", "shard"); err != nil {
		return err
	}
	if s.devices < 1 {
		return fmt.Errorf("--devices %d: plan for at least 1 device", s.devices)
	}
	maxDevices := s.devices
	if streamed {
		if maxDevices > 1 {
			return fmt.Errorf("--offload params with --devices %d: the streamed step feeds one device; use --devices 1", maxDevices)
		}
		return planStreamed(w, &s, &sf, *budgetText, plan.Throughput{Float32: *tflopsF32, BFloat16: *tflopsBF16}, *asJSON)
	}
	_ = fs.Set("microbatches", "1") // the grid chooses them; 1 lets the base config take any --batch
	_ = fs.Set("devices", "1")      // so does the device search: --devices is how many are available
	budget, err := parseBytes(*budgetText)
	if err != nil {
		return fmt.Errorf("--budget: %w", err)
	}
	for _, t := range []struct {
		name  string
		value float64
	}{{"tflops-f32", *tflopsF32}, {"tflops-bf16", *tflopsBF16}} {
		if !(t.value >= plan.MinTFLOPs && t.value <= plan.MaxTFLOPs) {
			return fmt.Errorf("--%s %g: an assumed throughput is from %g to %g TFLOP/s (1 MFLOP/s to 1 EFLOP/s)", t.name, t.value, plan.MinTFLOPs, plan.MaxTFLOPs)
		}
	}
	if *largest && s.model == "llama" && !set["preset"] {
		s.preset = "llama-3.1-8b" // the family's run: 4 sequences of 2048, as every published Llama preset's
	}
	base, err := s.config()
	if err != nil {
		return err
	}
	_, isGPT := base.Model.(models.GPT)
	_, isLlama := base.Model.(models.Llama)
	if !isGPT && maxDevices > 1 {
		return fmt.Errorf("--model %s: plan --devices splits the tutorial GPT; plan the gpt", s.model)
	}
	if !isGPT && !isLlama && *largest {
		return fmt.Errorf("--model %s: plan --largest scales the tutorial GPT or Llama 3; plan the gpt or the llama", s.model)
	}
	backend, spec, err := s.newBackend()
	if err != nil {
		return err
	}
	defer backend.Finalize()
	if *largest {
		if maxDevices > 1 || set["optimizer"] || set["offload"] {
			return fmt.Errorf("--largest compares one device with the tutorial's techniques and with --optimizer adam8bit --offload optimizer itself: drop --devices, --optimizer and --offload")
		}
		var progress io.Writer = os.Stderr
		if *asJSON {
			progress = nil
		}
		hostBudget, err := sf.hostBudget()
		if err != nil {
			return err
		}
		so, err := sf.options(plan.Throughput{Float32: *tflopsF32, BFloat16: *tflopsBF16}, streamedOptimizers()...)
		if err != nil {
			return err
		}
		return planLargest(w, backend, base, budget, spec.Kind == "xla", *asJSON, progress, largestStreamed{host: hostBudget, options: so})
	}
	if maxDevices > 1 {
		return planDevices(w, backend, spec, base, budget, plan.Throughput{Float32: *tflopsF32, BFloat16: *tflopsBF16}, maxDevices, *asJSON)
	}
	rate := plan.Throughput{Float32: *tflopsF32, BFloat16: *tflopsBF16}
	state := plan.StateOptions{Name: "--optimizer " + s.optimizer + " --offload " + s.offload, Optimizer: s.optimizer, Offload: s.offload}
	states := plan.StateLadder // Adam on the device first, then 8-bit Adam, then the optimizer offloaded
	if set["optimizer"] || set["offload"] {
		states = nil // the run's own
	}
	chunkings := []plan.Chunking{plan.ChunkingOf(base)}
	if _, ok := base.Model.(train.LanguageModel); ok && !set["attention"] && !set["cross-entropy"] {
		chunkings = plan.ChunkingLadder // plain first, then the chunked loss, then chunked attention too
	}
	rows, ladderState, chunking, err := plan.SearchLadder(backend, base, budget, rate, spec.Kind == "xla", states, chunkings)
	if err != nil {
		return err
	}
	if states != nil {
		state = ladderState
	}
	best := plan.Fastest(rows)
	if *asJSON {
		out := struct {
			Config      string            `json:"config"`
			Backend     string            `json:"backend"`
			BudgetBytes int64             `json:"budget_bytes"`
			State       plan.StateOptions `json:"state_options"`
			Chunking    plan.Chunking     `json:"chunking"`
			Best        *plan.Candidate   `json:"best"`
			Rows        []plan.Candidate  `json:"rows"`
		}{Config: describe(base), Backend: spec.String(), BudgetBytes: budget, State: state, Chunking: chunking, Rows: rows}
		if best >= 0 {
			out.Best = &rows[best]
		}
		return writeJSON(w, out)
	}
	fmt.Fprintf(w, "plan for %s\nbudget %s; memory from %s; time from FLOPs at %g (f32) / %g (bf16) TFLOP/s\n\n",
		describe(base), analysis.FormatBytes(budget), memorySource(spec.Kind == "xla"), *tflopsF32, *tflopsBF16)
	if best >= 0 {
		b := rows[best]
		fmt.Fprintf(w, "fastest that fits: %s compute, remat %s, %d micro-batches: %s, about %.3f s per step\n",
			b.Compute, b.Remat, b.MicroBatches, analysis.FormatBytes(b.Memory()), b.Seconds)
		fmt.Fprintf(w, "optimizer:         %s\n", describeState(state))
		if _, ok := base.Model.(train.LanguageModel); ok {
			fmt.Fprintf(w, "attention, loss:   %s (%s)\n", chunking, chunking.Flags())
		}
		fmt.Fprintln(w)
	} else {
		smallest := rows[0]
		for _, r := range rows {
			if r.Memory() < smallest.Memory() {
				smallest = r
			}
		}
		with := describeState(state)
		if _, ok := base.Model.(train.LanguageModel); ok {
			with += " and " + chunking.String()
		}
		if smallest.ArgumentBytes > budget { // the search stopped at one estimate: see plan.SearchLadder
			fmt.Fprintf(w, "nothing fits, even with %s: the parameters, the optimizer's state and one batch alone take %s, %s more than the budget;\n"+
				"choose a smaller --preset or --batch, or a larger device\n\n",
				with, analysis.FormatBytes(smallest.ArgumentBytes), analysis.FormatBytes(smallest.ArgumentBytes-budget))
		} else {
			fmt.Fprintf(w, "nothing fits, even with %s: the smallest configuration (%s) needs %s, %s more than the budget;\n"+
				"use more micro-batches (--batch must stay divisible), a smaller --preset or --seq, or a larger device\n\n",
				with, smallest.Variant, analysis.FormatBytes(smallest.Memory()), analysis.FormatBytes(smallest.Memory()-budget))
		}
	}
	fmt.Fprintln(w, "Pareto front (no other configuration is both faster and smaller):")
	fmt.Fprintf(w, "  %-8s %-9s %3s %12s %10s %s\n", "compute", "remat", "k", "memory", "step", "fits")
	for _, r := range rows {
		if r.Pareto {
			fits := "no"
			if r.Fits {
				fits = "yes"
			}
			fmt.Fprintf(w, "  %-8s %-9s %3d %12s %9.3fs %s\n", r.Compute, r.Remat, r.MicroBatches, analysis.FormatBytes(r.Memory()), r.Seconds, fits)
		}
	}
	return nil
}

func memorySource(xla bool) string {
	if xla {
		return "XLA's compiled statistics"
	}
	return "the sequential-execution estimate"
}

// parseBytes reads sizes like "24GiB", "80GB", "512MiB", "1.5TiB", "8EiB" or a plain number of
// bytes. 8 EiB (2^63 bytes) reads as the largest size, one byte less; a larger one is an error
// that says it is too large.
func parseBytes(s string) (int64, error) {
	units := []struct {
		suffix string
		factor float64
	}{{"EiB", 1 << 60}, {"PiB", 1 << 50}, {"TiB", 1 << 40}, {"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10},
		{"EB", 1e18}, {"PB", 1e15}, {"TB", 1e12}, {"GB", 1e9}, {"MB", 1e6}, {"KB", 1e3}, {"B", 1}}
	text := strings.TrimSpace(s)
	factor := 1.0
	for _, u := range units {
		if strings.HasSuffix(strings.ToUpper(text), strings.ToUpper(u.suffix)) {
			text, factor = strings.TrimSpace(text[:len(text)-len(u.suffix)]), u.factor
			break
		}
	}
	tooLarge := fmt.Errorf("%q is too large: sizes go up to 8EiB (%d bytes)", s, int64(math.MaxInt64))
	if factor == 1 && strings.Trim(text, "0123456789") == "" && text != "" { // a whole number of bytes: exact
		n, err := strconv.ParseInt(text, 10, 64)
		switch {
		case errors.Is(err, strconv.ErrRange):
			return 0, tooLarge
		case err == nil && n > 0:
			return n, nil
		}
	}
	v, err := strconv.ParseFloat(text, 64)
	if errors.Is(err, strconv.ErrRange) && v > 0 { // past float64
		return 0, tooLarge
	}
	if err != nil || !(v > 0) || math.IsInf(v, 0) {
		return 0, fmt.Errorf("%q is not a size: write a positive finite number and a unit, e.g. 24GiB, 80GB or 512MiB", s)
	}
	switch bytes := v * factor; {
	case bytes < math.MaxInt64: // float64(MaxInt64) rounds up to 2^63
		return max(int64(bytes), 1), nil
	case bytes == math.MaxInt64: // 2^63 exactly: 8 EiB
		return math.MaxInt64, nil
	}
	return 0, tooLarge
}

// largestStreamed are plan --largest's streamed rows' settings: the host budget and the rates.
type largestStreamed struct {
	host    int64
	options plan.StreamOptions
}

// planLargest answers plan --largest: the two largest models side by side, then the largest
// streamed ones (the weights in host memory, --offload params).
func planLargest(w io.Writer, backend backends.Backend, base train.Config, budget int64, compile, asJSON bool, progress io.Writer, st largestStreamed) error {
	var rows []plan.Largest
	family, header := plan.ScaledGPTs(), ""
	if l, ok := base.Model.(models.Llama); ok {
		family = plan.ScaledLlamas(l.Config.SeqLen)
		header = fmt.Sprintf("largest %s at sequence %d, batch %d,", family.Name, l.Config.SeqLen, base.Batch)
	}
	for _, opts := range []plan.StateOptions{plan.TutorialTechniques, plan.StateTechniques} {
		var row plan.Largest
		var err error
		if header == "" {
			row, err = plan.LargestThatFits(backend, base, budget, opts, compile, progress)
		} else {
			row, err = plan.LargestOf(backend, base, family, budget, opts, compile, progress)
		}
		if err != nil {
			return err
		}
		rows = append(rows, row)
	}
	if m, _ := family.Model(1); isStaged(m) {
		for _, opts := range plan.StreamedTechniques {
			row, err := plan.LargestStreamed(backend, base, family, budget, st.host, opts, st.options, progress)
			if err != nil {
				return err
			}
			rows = append(rows, row)
		}
	}
	ratio := 0.0
	if rows[0].Fits && rows[1].Fits {
		ratio = float64(rows[1].Params) / float64(rows[0].Params)
	}
	if asJSON {
		return writeJSON(w, struct {
			BudgetBytes     int64          `json:"budget_bytes"`
			HostBudgetBytes int64          `json:"host_budget_bytes"`
			Memory          string         `json:"memory_from"`
			Largest         []plan.Largest `json:"largest"`
			ParamsRatio     float64        `json:"params_ratio"`
		}{budget, st.host, memorySource(compile), rows, ratio})
	}
	if header == "" {
		header = "largest GPT of the tutorial's shape (head dim 128, MLP ×4, sequence 512, batch 64)"
	}
	fmt.Fprintf(w, "%s whose step fits %s\n(memory from %s):\n\n", header, analysis.FormatBytes(budget), memorySource(compile))
	fmt.Fprintf(w, "  %-55s %6s %6s %16s %10s  %s\n", "options", "layers", "hidden", "parameters", "memory", "settings")
	for i, r := range rows {
		if i == 2 {
			fmt.Fprintf(w, "\nstreamed (--offload params): the device holds a stage at a time, the host %s of master weights, optimizer state and gradients%s:\n",
				analysis.FormatBytes(st.host), map[bool]string{true: " and the frozen base", false: ""}[base.LoRA.Active()])
		}
		if !r.Fits {
			fmt.Fprintf(w, "  %-55s nothing fits\n", r.Options.Name)
			continue
		}
		if r.Step != nil {
			fmt.Fprintf(w, "  %-55s %6d %6d %16s %10s  host %s, %s compute, remat %s, %d micro-batches; step ~%.1f s, bound by %s\n", r.Options.Name, r.Layers, r.Hidden,
				groupDigits(r.Params), analysis.FormatBytes(r.Memory), analysis.FormatBytes(r.HostMemory), r.Variant.Compute, r.Variant.Remat, r.Variant.MicroBatches,
				r.Step.Seconds, r.Step.Bound)
			continue
		}
		fmt.Fprintf(w, "  %-55s %6d %6d %16s %10s  %s compute, remat %s, %d micro-batches\n", r.Options.Name, r.Layers, r.Hidden,
			groupDigits(r.Params), analysis.FormatBytes(r.Memory), r.Variant.Compute, r.Variant.Remat, r.Variant.MicroBatches)
	}
	if ratio > 0 {
		fmt.Fprintf(w, "\nwith 8-bit Adam and the optimizer offloaded, %.2fx the parameters fit\n", ratio)
	}
	return nil
}

// describeState says where the optimizer's state lives and how it is stored, with the flags.
func describeState(s plan.StateOptions) string {
	where := "on the device"
	if s.Offload == train.OffloadOptimizer.String() {
		where = "offloaded to the host"
	}
	return fmt.Sprintf("%s %s (--optimizer %s --offload %s)", s.Optimizer, where, s.Optimizer, cmp.Or(s.Offload, train.OffloadNone.String()))
}

// isStaged reports whether m runs as stages (train.Staged), which a streamed run needs.
func isStaged(m train.Model) bool {
	_, ok := m.(train.Staged)
	return ok
}
