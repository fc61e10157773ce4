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
// last pair's (the smallest). The state rungs are outside because they cost time the FLOP-based
// estimate does not see (8-bit Adam's quantization, the offload's transfers); chunking costs
// little. On a state rung where the first chunking fits nothing, the last (the most chunked, the
// least memory) is tried next, and the ones between only when it fits: a budget nothing fits
// costs two searches per state rung, not one per chunking. Nil states keep base's optimizer and
// offload (the StateOptions returned is then the zero value).
func SearchLadder(backend backends.Backend, base train.Config, budget int64, rate Throughput, compile bool,
	states []StateOptions, chunkings []Chunking) ([]Candidate, StateOptions, Chunking, error) {
	if len(chunkings) == 0 {
		panic("plan.SearchLadder: no chunking to try")
	}
	own := states == nil
	if own {
		states = []StateOptions{{}}
	}
	for i, opts := range states {
		c := base
		if !own {
			var err error
			if c, err = opts.Apply(base); err != nil {
				return nil, opts, Chunking{}, err
			}
		}
		search := func(k Chunking) ([]Candidate, bool, error) {
			rows, err := Search(backend, k.Apply(c), budget, rate, compile)
			return rows, err == nil && Fastest(rows) >= 0, err
		}
		rows, fits, err := search(chunkings[0])
		if err != nil || fits || len(chunkings) == 1 {
			if err != nil || fits || i == len(states)-1 {
				return rows, opts, chunkings[0], err
			}
			continue
		}
		last := chunkings[len(chunkings)-1]
		leanest, fits, err := search(last)
		if err != nil || (!fits && i == len(states)-1) {
			return leanest, opts, last, err
		}
		if !fits {
			continue
		}
		for _, k := range chunkings[1 : len(chunkings)-1] { // the plainest that fits
			rows, fits, err := search(k)
			if err != nil || fits {
				return rows, opts, k, err
			}
		}
		return leanest, opts, last, nil
	}
	panic("unreachable: the ladders are not empty")
}
