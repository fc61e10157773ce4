package plan

import (
	"encoding/json"
	"fmt"

	"github.com/gomlx/gomlx/backends"

	"github.com/onegpu/onegpu/layers"
	"github.com/onegpu/onegpu/train"
)

// Chunking is how a language model's step computes its attention and its loss: plain (the zero
// value) or chunked, as train.Config's Attention and CrossEntropy say.
type Chunking struct {
	Attention    layers.Attention
	CrossEntropy layers.CrossEntropy
}

// ChunkingOf is c's attention and cross-entropy.
func ChunkingOf(c train.Config) Chunking {
	return Chunking{Attention: c.Attention, CrossEntropy: c.CrossEntropy}
}

// Apply returns c with the chunking's attention and cross-entropy.
func (k Chunking) Apply(c train.Config) train.Config {
	c.Attention, c.CrossEntropy = k.Attention, k.CrossEntropy
	return c
}

// Plain reports whether neither attention nor the loss is chunked.
func (k Chunking) Plain() bool { return !k.Attention.Chunked && k.CrossEntropy.Chunk == 0 }

// Flags are the CLI's flags for the chunking: "--attention chunked --cross-entropy chunked=512".
func (k Chunking) Flags() string {
	return fmt.Sprintf("--attention %s --cross-entropy %s", k.Attention, k.CrossEntropy)
}

// String is "attention A, cross-entropy C".
func (k Chunking) String() string {
	return fmt.Sprintf("attention %s, cross-entropy %s", k.Attention, k.CrossEntropy)
}

// MarshalJSON writes {"attention": "chunked", "cross_entropy": "chunked=512"}, the forms
// layers.ParseAttention and layers.ParseCrossEntropy read.
func (k Chunking) MarshalJSON() ([]byte, error) {
	return json.Marshal(struct {
		Attention    string `json:"attention"`
		CrossEntropy string `json:"cross_entropy"`
	}{k.Attention.String(), k.CrossEntropy.String()})
}

var (
	chunkedAttention = layers.Attention{Chunked: true}
	chunkedLoss      = layers.CrossEntropy{Chunk: layers.DefaultCrossEntropyChunk}
)

// ChunkingLadder is what SearchLadder tries, in order, on each rung of the state ladder when a
// run leaves attention and loss to the plan: plain, then the chunked loss (no [tokens, vocab]
// logits: the largest buffer of a large vocabulary), then chunked attention as well (its blocks
// chosen by layers.AutoAttentionBlock). Chunking costs little time (recomputed logits and scores
// in the backward pass, fewer masked scores) but more ops to compile, so the first rung that
// fits is the answer.
var ChunkingLadder = []Chunking{
	{},
	{CrossEntropy: chunkedLoss},
	{Attention: chunkedAttention, CrossEntropy: chunkedLoss},
}

// AllChunkings are the four choices of plain or chunked attention and loss, plainest first.
var AllChunkings = []Chunking{
	{},
	{CrossEntropy: chunkedLoss},
	{Attention: chunkedAttention},
	{Attention: chunkedAttention, CrossEntropy: chunkedLoss},
}

// SearchLadder is Search over the rungs of states and, on each, of chunkings: it returns the
// candidates of the first pair on which one fits, and that pair; when none fits anywhere, the
// last pair's (the leanest). The state rungs are outside because they cost time the FLOP-based
// estimate does not see (8-bit Adam's quantization, the offload's transfers); chunking costs
// little. Nil states keep base's optimizer and offload (the StateOptions returned is then the
// zero value).
//
// A budget nothing fits is answered without searching every pair: every configuration holds its
// parameters, its optimizer's state and a batch (ArgumentBytes), which no compute dtype, remat or
// micro-batch count changes, so one estimate of the leanest pair whose arguments exceed the budget
// answers alone (its one candidate); otherwise, when neither the first pair nor the leanest fits,
// those two searches answer (before, a budget of 1 byte searched every rung: 199 s for the tiny
// GPT). On a rung whose first chunking fits nothing, the last (the most chunked) is tried next,
// and the ones between only when it fits.
func SearchLadder(backend backends.Backend, base train.Config, budget int64, rate Throughput, compile bool,
	states []StateOptions, chunkings []Chunking) ([]Candidate, StateOptions, Chunking, error) {
	if len(chunkings) == 0 {
		panic("plan.SearchLadder: no chunking to try")
	}
	own := states == nil
	if own {
		states = []StateOptions{{}}
	}
	pair := func(i, j int) (train.Config, error) {
		c := base
		if !own {
			var err error
			if c, err = states[i].Apply(base); err != nil {
				return c, err
			}
		}
		return chunkings[j].Apply(c), nil
	}
	type key struct{ state, chunking int }
	searched := map[key][]Candidate{}
	search := func(i, j int) ([]Candidate, bool, error) {
		rows, ok := searched[key{i, j}]
		if !ok {
			c, err := pair(i, j)
			if err != nil {
				return nil, false, err
			}
			if rows, err = Search(backend, c, budget, rate, compile); err != nil {
				return nil, false, err
			}
			searched[key{i, j}] = rows
		}
		return rows, Fastest(rows) >= 0, nil
	}
	lastState, lastChunking := len(states)-1, len(chunkings)-1
	if _, beyond := argumentsBeyond(backend, budget, rate, pair, 0, 0); beyond { // one cheap estimate, then the leanest's
		if probe, beyond := argumentsBeyond(backend, budget, rate, pair, lastState, lastChunking); beyond {
			return []Candidate{probe}, states[lastState], chunkings[lastChunking], nil
		}
	}
	rows, fits, err := search(0, 0)
	if err != nil || fits || lastState == 0 && lastChunking == 0 {
		return rows, states[0], chunkings[0], err
	}
	if leanest, fits, err := search(lastState, lastChunking); err != nil || !fits {
		return leanest, states[lastState], chunkings[lastChunking], err
	}
	for i := range states { // something fits: the first pair, in the ladder's order, where it does
		rows, fits, err := search(i, 0)
		if err != nil || fits {
			return rows, states[i], chunkings[0], err
		}
		if lastChunking == 0 {
			continue
		}
		leanest, fits, err := search(i, lastChunking)
		if err != nil {
			return nil, states[i], chunkings[lastChunking], err
		}
		if !fits {
			continue
		}
		for j := 1; j < lastChunking; j++ { // the plainest that fits
			if rows, fits, err := search(i, j); err != nil || fits {
				return rows, states[i], chunkings[j], err
			}
		}
		return leanest, states[i], chunkings[lastChunking], nil
	}
	panic("unreachable: the leanest pair fits")
}

// argumentsBeyond estimates the first variant of the pair (i, j) without compiling, and returns it
// when its arguments alone (parameters, optimizer state, a batch: the same for every variant of
// the pair) exceed budget: then nothing of the pair fits.
func argumentsBeyond(backend backends.Backend, budget int64, rate Throughput,
	pair func(i, j int) (train.Config, error), i, j int) (Candidate, bool) {
	c, err := pair(i, j)
	if err != nil {
		return Candidate{}, false
	}
	for _, v := range SearchGrid(c.Batch) {
		config, err := v.Apply(c)
		if err != nil {
			continue
		}
		row, err := estimateCandidate(backend, v, config, budget, rate, false)
		if err != nil || row.ArgumentBytes <= budget {
			return Candidate{}, false
		}
		row.Fits, row.Pareto = false, true
		return row, true
	}
	return Candidate{}, false
}
