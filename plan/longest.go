package plan

import (
	"fmt"
	"io"

	"github.com/gomlx/gomlx/backends"

	"github.com/onegpu/onegpu/analysis"
	"github.com/onegpu/onegpu/train"
)

// SeqStep is the granularity of LongestThatFits: sequences are multiples of 128 tokens.
const SeqStep = 128

// MaxSeq is the longest sequence LongestThatFits tries, 2^24 tokens: a model that takes any length
// and a budget that fits it are answered "at least MaxSeq".
const MaxSeq = 1 << 24

// Longest is the longest sequence whose train step fits a budget with one chunking.
type Longest struct {
	Seq          int      `json:"seq"`
	Attention    string   `json:"attention"`
	CrossEntropy string   `json:"cross_entropy"`
	Chunking     Chunking `json:"-"`
	// Memory is the step's memory at Seq (the estimate's: Estimate.Memory).
	Memory int64 `json:"memory_bytes"`
	// Fits is false when not even SeqStep tokens fit.
	Fits bool `json:"fits"`
	// Bound, when not empty, is why the next longer sequence was not tried: the model takes no
	// more positions (or MaxSeq was reached); the budget did not set the answer.
	Bound string `json:"bound,omitempty"`
	// Evaluations is how many sequence lengths were estimated: about twice the base-2 logarithm
	// of Seq/SeqStep.
	Evaluations int `json:"sequences_estimated"`
}

// LongestThatFits searches the sequence length, in multiples of SeqStep up to MaxSeq, for the
// longest whose train step (base with chunking's attention and cross-entropy, and the model
// withSeq gives, e.g. recipes.Family.WithSeq) fits budget, each length a whole step built and
// analyzed (EstimateStep; compile: XLA's compiled total, minutes each at long sequences): each
// length tried is where the memory of the lengths estimated before meets the budget, with
// bisection as a safeguard (guidedFitting), so that it estimates at most about 2·log2(seq/SeqStep)
// lengths and usually far fewer. Memory grows with the sequence, so the answer is exact for the
// estimate. A length the model refuses
// (withSeq's or Config.Validate's error: a Llama's positions) ends the search there, and Longest's
// Bound says why. progress, when not nil, gets one line per length tried.
func LongestThatFits(backend backends.Backend, base train.Config, budget int64, withSeq func(train.Model, int) (train.Model, error),
	chunking Chunking, compile bool, progress io.Writer) (Longest, error) {
	row := Longest{Chunking: chunking, Attention: chunking.Attention.String(), CrossEntropy: chunking.CrossEntropy.String()}
	refused := map[int]string{}
	measure := func(n int) (int64, bool, error) {
		seq := n * SeqStep
		m, err := withSeq(base.Model, seq)
		config := chunking.Apply(base)
		config.Model = m
		if err == nil {
			err = config.Validate()
		}
		if err != nil {
			refused[n] = err.Error()
			return 0, true, nil
		}
		row.Evaluations++
		e, err := EstimateStep(backend, config, compile)
		if err != nil {
			return 0, false, fmt.Errorf("sequence %d, %s: %w", seq, chunking, err)
		}
		ok := e.Memory() <= budget
		if progress != nil {
			fmt.Fprintf(progress, "  %-50s sequence %8d: %10s %s\n", chunking, seq, analysis.FormatBytes(e.Memory()),
				map[bool]string{true: "fits", false: "too large"}[ok])
		}
		if ok && seq > row.Seq {
			row.Seq, row.Memory, row.Fits = seq, e.Memory(), true
		}
		return e.Memory(), false, nil
	}
	top := MaxSeq / SeqStep
	n, err := guidedFitting(top, budget, measure)
	switch {
	case err != nil:
		return row, err
	case n == 0:
		if why, bad := refused[1]; bad {
			return row, fmt.Errorf("sequence %d, %s: %s", SeqStep, chunking, why)
		}
	case n == top:
		row.Bound = fmt.Sprintf("the search stops at %d tokens", MaxSeq)
	default:
		row.Bound = refused[n+1] // the model refused the next length: it, not the budget, ends the search
	}
	return row, nil // the row is the longest fitting length's
}

// LongestOver is LongestThatFits for each chunking, and the index of the one that fits the
// longest sequence (the first, the plainest in AllChunkings' order, among equals); -1 when none
// fits any.
func LongestOver(backend backends.Backend, base train.Config, budget int64, withSeq func(train.Model, int) (train.Model, error),
	chunkings []Chunking, compile bool, progress io.Writer) ([]Longest, int, error) {
	var rows []Longest
	best := -1
	for _, k := range chunkings {
		row, err := LongestThatFits(backend, base, budget, withSeq, k, compile, progress)
		if err != nil {
			return rows, best, err
		}
		rows = append(rows, row)
		if row.Fits && (best < 0 || row.Seq > rows[best].Seq) {
			best = len(rows) - 1
		}
	}
	return rows, best, nil
}
