package main

import (
	"fmt"
	"io"
	"os"
	"strconv"

	"github.com/onegpu/onegpu/analysis"
	"github.com/onegpu/onegpu/plan"
	"github.com/onegpu/onegpu/recipes"
)

// planLongest answers plan --longest: the longest sequence whose step fits the budget, with each
// choice of plain or chunked attention and cross-entropy (or the one the flags fix), and which
// choice fits the longest.
func planLongest(w io.Writer, s *setup, set map[string]bool, budgetText string, asJSON bool) error {
	if err := notApplicable(set, "--longest searches the sequence length itself", "seq"); err != nil {
		return err
	}
	if err := notApplicable(set, "--longest answers for one device, in memory, not time", "devices", "shard", "tflops-f32", "tflops-bf16", "lr", "seed"); err != nil {
		return err
	}
	budget, err := parseBytes(budgetText)
	if err != nil {
		return fmt.Errorf("--budget: %w", err)
	}
	// The leanest run unless the flags say otherwise: one sequence per micro-batch, bfloat16
	// compute over float32 parameters, remat of whole blocks.
	if !set["batch"] {
		_ = s.fs.Set("batch", "1")
	}
	if !set["microbatches"] {
		_ = s.fs.Set("microbatches", strconv.Itoa(s.batch))
	}
	if !set["policy"] {
		s.policy = "params=float32,compute=bfloat16,output=float32"
	}
	if !set["remat"] {
		s.remat = "block"
	}
	family, err := recipes.Lookup(s.model)
	if err != nil {
		return err
	}
	if family.WithSeq == nil {
		return fmt.Errorf("--longest: the %s is not a language model, it has no sequence to lengthen", s.model)
	}
	base, err := s.config()
	if err != nil {
		return err
	}
	backend, spec, err := s.newBackend()
	if err != nil {
		return err
	}
	defer backend.Finalize()
	chunkings := plan.AllChunkings
	if set["attention"] || set["cross-entropy"] {
		chunkings = []plan.Chunking{plan.ChunkingOf(base)}
	}
	var progress io.Writer = os.Stderr
	if asJSON {
		progress = nil
	}
	compile := spec.Kind == "xla"
	rows, best, err := plan.LongestOver(backend, base, budget, family.WithSeq, chunkings, compile, progress)
	if err != nil {
		return err
	}
	config := describe(base)
	if asJSON {
		out := struct {
			Config      string         `json:"config"`
			Backend     string         `json:"backend"`
			BudgetBytes int64          `json:"budget_bytes"`
			Memory      string         `json:"memory_from"`
			Longest     *plan.Longest  `json:"longest"`
			ByOptions   []plan.Longest `json:"by_options"`
		}{Config: config, Backend: spec.String(), BudgetBytes: budget, Memory: memorySource(compile), ByOptions: rows}
		if best >= 0 {
			out.Longest = &rows[best]
		}
		return writeJSON(w, out)
	}
	fmt.Fprintf(w, "longest sequence whose train step fits %s (memory from %s), with %s\n(the run, its sequence varied: %s):\n\n",
		analysis.FormatBytes(budget), memorySource(compile), describeState(plan.StateOptions{Optimizer: s.optimizer, Offload: s.offload}), config)
	fmt.Fprintf(w, "  %-22s %-16s %10s %12s\n", "attention", "cross-entropy", "longest", "memory")
	for _, r := range rows {
		if !r.Fits {
			fmt.Fprintf(w, "  %-22s %-16s %10s\n", r.Attention, r.CrossEntropy, "none fits")
			continue
		}
		bound := ""
		if r.Bound != "" {
			bound = "  (no longer: " + r.Bound + ")"
		}
		fmt.Fprintf(w, "  %-22s %-16s %10d %12s%s\n", longestAttention(r), r.CrossEntropy, r.Seq, analysis.FormatBytes(r.Memory), bound)
	}
	if best < 0 {
		fmt.Fprintf(w, "\nnot even %d tokens fit: use a larger budget, a smaller model or 8-bit Adam (--optimizer adam8bit)\n", plan.SeqStep)
		return nil
	}
	b := rows[best]
	fmt.Fprintf(w, "\nlongest: %d tokens with attention %s, cross-entropy %s (%s)", b.Seq, longestAttention(b), b.CrossEntropy, b.Chunking.Flags())
	if plain := rows[0]; best > 0 && plain.Chunking.Plain() && plain.Fits {
		fmt.Fprintf(w, ": %.1fx the %d tokens of plain attention and loss", float64(b.Seq)/float64(plain.Seq), plain.Seq)
	}
	fmt.Fprintln(w)
	return nil
}

// longestAttention is a row's attention with the blocks chunked attention chooses at its length.
func longestAttention(r plan.Longest) string {
	a := r.Chunking.Attention
	if !a.Chunked || a.Block > 0 {
		return a.String()
	}
	queries, _ := a.Blocks(r.Seq)
	return fmt.Sprintf("%s (block %d)", a, queries)
}
