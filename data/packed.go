package data

import (
	"fmt"
	"math/rand/v2"

	"github.com/gomlx/gomlx/pkg/core/tensors"
)

// Packed is language modelling on documents packed into sequences (Pack). A batch is five
// tensors [batch, SeqLen], in the order a packed language model takes them (models.Llama with
// Packed set):
//
//	tokens     int32    the inputs: each document's tokens but its last
//	targets    int32    the tokens to predict: each document's tokens but its first
//	segments   int32    1, 2, ... for the documents of a sequence, 0 for padding: attention stays
//	                    within a segment
//	positions  int32    each token's position within its document, from 0: rotary positions
//	weights    float32  1 where the target carries the loss, 0 for prompts, read-only messages
//	                    and padding
//
// As training data (Batch) the sequences are visited in an order drawn once from the seed, batch
// after batch, starting over when all are used; as evaluation data (EvalBatch) each sequence is
// read once, in order.
type Packed struct {
	text    *TokenizedText
	packing *Packing
	batch   int
	seed    uint64
	order   []int
}

// NewPacked packs text into sequences of seqLen tokens (Pack) for batches of batch sequences of
// a model of vocabulary vocab. It returns an error for sizes below 1, an id outside [0, vocab) (a
// tokenizer that does not fit the model), or nothing to learn.
func NewPacked(text *TokenizedText, seqLen, batch, vocab int, seed uint64) (*Packed, error) {
	if err := checkDataSizes("packed documents", size{"batch", batch}, size{"sequence length", seqLen}); err != nil {
		return nil, err
	}
	for i, id := range text.IDs {
		if id < 0 || int(id) >= vocab {
			doc, _ := findDocument(text.Starts, int64(i))
			return nil, fmt.Errorf("%s: token id %d (document %d) is outside the model's vocabulary [0, %d): the tokenizer does not fit the model",
				text.Source, id, doc+1, vocab)
		}
	}
	p, err := Pack(text.Tokenized, seqLen)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", text.Source, err)
	}
	d := &Packed{text: text, packing: p, batch: batch, seed: seed}
	d.order = rand.New(rand.NewPCG(seed, 0x9ac4)).Perm(len(p.Rows))
	return d, nil
}

// findDocument returns the document holding token i.
func findDocument(starts []int64, i int64) (int, bool) {
	lo, hi := 0, len(starts)-1
	for lo < hi {
		mid := (lo + hi + 1) / 2
		if starts[mid] <= i {
			lo = mid
		} else {
			hi = mid - 1
		}
	}
	return lo, lo < len(starts)-1
}

// Packing is how the documents were packed.
func (d *Packed) Packing() *Packing { return d.packing }

// Text is the tokenized data set.
func (d *Packed) Text() *TokenizedText { return d.text }

// Sequences is the number of packed sequences.
func (d *Packed) Sequences() int { return len(d.packing.Rows) }

// Batch returns the step-th batch: sequences step·batch to step·batch+batch-1 of the drawn order
// (modulo their number).
func (d *Packed) Batch(step int) []*tensors.Tensor {
	rows := make([]int, d.batch)
	for b := range rows {
		rows[b] = d.order[(step*d.batch+b)%len(d.order)]
	}
	return d.rows(rows)
}

// EvalBatches is the number of batches that hold every sequence once (the last one padded).
func (d *Packed) EvalBatches() int { return (len(d.packing.Rows) + d.batch - 1) / d.batch }

// EvalBatch returns sequences i·batch to i·batch+batch-1 in packing order; past the last
// sequence, rows of padding, which carry no loss.
func (d *Packed) EvalBatch(i int) []*tensors.Tensor {
	rows := make([]int, d.batch)
	for b := range rows {
		rows[b] = i*d.batch + b
		if rows[b] >= len(d.packing.Rows) {
			rows[b] = -1
		}
	}
	return d.rows(rows)
}

// rows lays out the given sequences (-1: padding only) as a batch.
func (d *Packed) rows(rows []int) []*tensors.Tensor {
	seq := d.packing.SeqLen
	n := len(rows) * seq
	tokens, targets, segments, positions := make([]int32, n), make([]int32, n), make([]int32, n), make([]int32, n)
	weights := make([]float32, n)
	for b, r := range rows {
		if r < 0 {
			continue
		}
		at := b * seq
		for s, doc := range d.packing.Rows[r] {
			ids, trained := d.text.Document(doc.Index)
			for i := range doc.Tokens - 1 {
				tokens[at], targets[at] = ids[i], ids[i+1]
				segments[at], positions[at] = int32(s+1), int32(i)
				weights[at] = float32(trained[i+1])
				at++
			}
		}
	}
	shape := []int{len(rows), seq}
	return []*tensors.Tensor{tensors.FromFlatDataAndDimensions(tokens, shape...), tensors.FromFlatDataAndDimensions(targets, shape...),
		tensors.FromFlatDataAndDimensions(segments, shape...), tensors.FromFlatDataAndDimensions(positions, shape...),
		tensors.FromFlatDataAndDimensions(weights, shape...)}
}

// Record is what a checkpoint records of this data (see train.DataRecord): the data's and the
// tokenizer's SHA-256, the format, the split, the packing and the seed that orders the
// sequences.
func (d *Packed) Record() string {
	return fmt.Sprintf("%s, packed first-fit decreasing into sequences of %d, ordered with seed %d", d.text.describe(), d.packing.SeqLen, d.seed)
}

func (d *Packed) Describe() string {
	return fmt.Sprintf("%s%s: %d %s documents in %d sequences of %d, batches of %d", d.text.Source, d.text.heldNote(), d.packing.Packed, d.text.Kind,
		len(d.packing.Rows), d.packing.SeqLen, d.batch)
}

// PackedStats sum up packed data, for people and --json: what was read, how it was packed.
type PackedStats struct {
	Source string `json:"source"`
	Kind   string `json:"kind"`
	// Documents and Tokens are what was read (after an evaluation split); Cached says the ids
	// came from the cache (CachePath).
	Documents int    `json:"documents"`
	Tokens    int64  `json:"tokens"`
	Cached    bool   `json:"cached"`
	CachePath string `json:"cache_path,omitempty"`
	// Sequences of SeqLen positions hold the packed documents; Efficiency is the share of
	// positions they fill.
	Sequences  int     `json:"sequences"`
	SeqLen     int     `json:"seq_len"`
	Efficiency float64 `json:"packing_efficiency"`
	PackingStats
}

// Stats sums the data up (nil for nil data).
func (d *Packed) Stats() *PackedStats {
	if d == nil {
		return nil
	}
	t, p := d.text, d.packing
	return &PackedStats{Source: t.Source, Kind: t.Kind, Documents: t.Documents(), Tokens: int64(len(t.IDs)), Cached: t.Cached, CachePath: t.CachePath,
		Sequences: len(p.Rows), SeqLen: p.SeqLen, Efficiency: p.Efficiency(), PackingStats: p.PackingStats}
}

// Summary sums up the data in a few lines: documents, tokens, the packing's efficiency and what
// truncation dropped.
func (d *Packed) Summary() string {
	cached := ""
	if d.text.Cached {
		cached = " (tokenized earlier: " + d.text.CachePath + ")"
	}
	return fmt.Sprintf("%s%s%s: %d %s documents, %s tokens\n  %s", d.text.Source, d.text.heldNote(), cached, d.text.Documents(), d.text.Kind,
		countString(int64(len(d.text.IDs))), d.packing)
}
