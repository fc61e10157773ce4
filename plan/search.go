package plan

import (
	"fmt"
	"slices"
	"sort"

	"github.com/gomlx/gomlx/backends"

	"github.com/onegpu/onegpu/train"
)

// Throughput is the assumed arithmetic rate of a device, in TFLOP/s, by compute dtype.
type Throughput struct {
	Float32, BFloat16 float64
}

// The throughputs a plan takes, in TFLOP/s: from 1 MFLOP/s to 1 EFLOP/s, so that every step's
// time (FLOPs / throughput) is a finite number of seconds.
const (
	MinTFLOPs = 1e-6
	MaxTFLOPs = 1e6
)

// Validate returns an error naming a throughput outside [MinTFLOPs, MaxTFLOPs].
func (t Throughput) Validate() error {
	for _, r := range []struct {
		name  string
		value float64
	}{{"float32", t.Float32}, {"bfloat16", t.BFloat16}} {
		if !(r.value >= MinTFLOPs && r.value <= MaxTFLOPs) {
			return fmt.Errorf("a %s throughput of %g TFLOP/s: give one from %g to %g TFLOP/s (1 MFLOP/s to 1 EFLOP/s)", r.name, r.value, MinTFLOPs, MaxTFLOPs)
		}
	}
	return nil
}

// A5000 is an RTX A5000, the tutorial's 24 GB GPU: 27.8 TFLOP/s in float32, 111 in bfloat16 on
// its tensor cores.
var A5000 = Throughput{Float32: 27.8, BFloat16: 111}

// Candidate is one configuration Search considered.
type Candidate struct {
	Variant
	Estimate
	// Seconds is the step time estimated from FLOPs (recomputation included) at the assumed
	// throughput of the compute dtype.
	Seconds float64 `json:"estimated_step_seconds"`
	Fits    bool    `json:"fits"`
	// Pareto marks a candidate no faster one beats in memory.
	Pareto bool `json:"pareto"`
}

// Search estimates every variant of SearchGrid applied to base (a GPT config) on backend without
// running anything (compile: also XLA's compiled memory), and returns them sorted by estimated
// step time, then memory, with Fits (memory within budget bytes) and Pareto set. Variants whose
// micro-batches do not divide the batch are left out.
func Search(backend backends.Backend, base train.Config, budget int64, rate Throughput, compile bool) ([]Candidate, error) {
	return SearchOver(SearchGrid(base.Batch), backend, base, budget, rate, compile)
}

// SearchOver is Search over the given variants instead of SearchGrid's (e.g. a part of it, to
// plan faster: the steps with many micro-batches are the largest graphs to build).
func SearchOver(variants []Variant, backend backends.Backend, base train.Config, budget int64, rate Throughput, compile bool) ([]Candidate, error) {
	if err := transformer(base.Model); err != nil {
		return nil, err
	}
	if err := rate.Validate(); err != nil {
		return nil, err
	}
	var rows []Candidate
	for _, v := range variants {
		config, err := v.Apply(base)
		if err != nil {
			continue // a micro-batch count that does not divide the batch
		}
		row, err := estimateCandidate(backend, v, config, budget, rate, compile)
		if err != nil {
			return nil, err
		}
		rows = append(rows, row)
	}
	sort.SliceStable(rows, func(i, j int) bool {
		if rows[i].Seconds != rows[j].Seconds {
			return rows[i].Seconds < rows[j].Seconds
		}
		return rows[i].Memory() < rows[j].Memory()
	})
	smallest := int64(-1)
	for i := range rows { // sorted by time: on the front when no faster row is as small
		if m := rows[i].Memory(); smallest < 0 || m < smallest {
			rows[i].Pareto, smallest = true, m
		}
	}
	return rows, nil
}

// estimateCandidate estimates config, variant v of a search, as a Candidate (Pareto unset).
func estimateCandidate(backend backends.Backend, v Variant, config train.Config, budget int64, rate Throughput, compile bool) (Candidate, error) {
	e, err := EstimateStep(backend, config, compile)
	if err != nil {
		return Candidate{}, fmt.Errorf("%s: %w", v, err)
	}
	tflops := rate.Float32
	if v.Compute == "bfloat16" {
		tflops = rate.BFloat16
	}
	return Candidate{Variant: v, Estimate: e, Seconds: float64(e.FLOPs) / (tflops * 1e12), Fits: e.Memory() <= budget}, nil
}

// Fastest returns the index of the first (fastest) candidate that fits, or -1.
func Fastest(rows []Candidate) int {
	for i, r := range rows {
		if r.Fits {
			return i
		}
	}
	return -1
}

// transformer returns an error unless m marks the kinds of block the grids choose from: a
// transformer's "mlp", "attn" and whole "block".
func transformer(m train.Model) error {
	k, ok := m.(interface{ RematKinds() []string })
	if ok && slices.Contains(k.RematKinds(), "mlp") && slices.Contains(k.RematKinds(), "attn") && slices.Contains(k.RematKinds(), "block") {
		return nil
	}
	return fmt.Errorf("model %T: plan chooses remat over a transformer's blocks (kinds mlp, attn and block); plan the gpt", m)
}
