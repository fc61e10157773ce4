package data

import (
	"cmp"
	"fmt"
	"slices"
)

// Packing places documents into sequences of SeqLen tokens by first-fit decreasing: the
// documents, longest first, each go into the first sequence with room for them, a new one when
// none has. A document of n tokens fills n-1 positions (its inputs are its first n-1 tokens, its
// targets its last n-1), is never split across sequences, and one longer than SeqLen+1 tokens is
// truncated to its first SeqLen+1. First-fit decreasing needs at most 11/9 of the fewest sequences
// possible, plus 6/9 (Dósa 2007). What is left of a sequence is padding: its own segment 0, no loss.
type Packing struct {
	SeqLen int
	// Rows lists each sequence's documents, in the order they lie in it.
	Rows [][]PackedDocument
	PackingStats
}

// PackedDocument is a document in a packed sequence: its index in the Tokenized and how many of
// its tokens are used (all but those truncation dropped).
type PackedDocument struct {
	Index, Tokens int
}

// PackingStats sum up a packing, for the run's summary.
type PackingStats struct {
	// Packed documents were packed; Skipped were not, having nothing to learn (fewer than two
	// tokens, or no target that carries the loss within the first SeqLen+1 tokens).
	Packed  int `json:"packed_documents"`
	Skipped int `json:"skipped_documents"`
	// Truncated documents were longer than SeqLen+1 tokens; DroppedTokens is what they lost.
	Truncated     int   `json:"truncated_documents"`
	DroppedTokens int64 `json:"dropped_tokens"`
	// Positions is the positions documents fill (tokens minus one per document), LossTokens the
	// targets among them that carry the loss.
	Positions  int64 `json:"positions"`
	LossTokens int64 `json:"loss_tokens"`
}

// Efficiency is the share of the sequences' positions that documents fill (the rest is padding).
func (p *Packing) Efficiency() float64 {
	if len(p.Rows) == 0 {
		return 0
	}
	return float64(p.Positions) / float64(len(p.Rows)*p.SeqLen)
}

// String sums the packing up in a line.
func (p *Packing) String() string {
	s := fmt.Sprintf("%d documents packed into %d sequences of %d (first-fit decreasing): %.1f%% of the positions filled, %s targets carry the loss",
		p.Packed, len(p.Rows), p.SeqLen, 100*p.Efficiency(), countString(p.LossTokens))
	if p.Truncated > 0 {
		s += fmt.Sprintf("; %d documents longer than %d tokens truncated (%s tokens dropped)", p.Truncated, p.SeqLen+1, countString(p.DroppedTokens))
	}
	if p.Skipped > 0 {
		s += fmt.Sprintf("; %d documents with nothing to learn skipped", p.Skipped)
	}
	return s
}

// Pack packs the documents of t into sequences of seqLen positions (see Packing). It returns an
// error when no document has anything to learn.
func Pack(t *Tokenized, seqLen int) (*Packing, error) {
	if seqLen < 1 {
		return nil, fmt.Errorf("packing into sequences of %d tokens: the sequence length must be at least 1", seqLen)
	}
	p := &Packing{SeqLen: seqLen}
	type item struct{ index, tokens int }
	var items []item
	for i := range t.Documents() {
		ids, trained := t.Document(i)
		n := min(len(ids), seqLen+1)
		if n < 2 || !slices.Contains(trained[1:n], 1) {
			p.Skipped++
			continue
		}
		if n < len(ids) {
			p.Truncated++
			p.DroppedTokens += int64(len(ids) - n)
		}
		for _, f := range trained[1:n] {
			p.LossTokens += int64(f)
		}
		p.Positions += int64(n - 1)
		items = append(items, item{i, n})
	}
	if len(items) == 0 {
		return nil, fmt.Errorf("none of the %d documents has anything to learn (a target that carries the loss)", t.Documents())
	}
	p.Packed = len(items)
	slices.SortStableFunc(items, func(a, b item) int { return cmp.Compare(b.tokens, a.tokens) })
	free := newFreeTree(len(items), seqLen)
	for _, it := range items {
		row := free.firstFit(it.tokens - 1)
		if row == len(p.Rows) {
			p.Rows = append(p.Rows, nil)
		}
		p.Rows[row] = append(p.Rows[row], PackedDocument{Index: it.index, Tokens: it.tokens})
	}
	return p, nil
}

// freeTree finds the first of n sequences with room for a document in O(log n): a segment tree
// of the room left in each, every node holding the most room below it.
type freeTree struct {
	leaves int
	room   []int
}

func newFreeTree(n, seqLen int) *freeTree {
	leaves := 1
	for leaves < n {
		leaves *= 2
	}
	f := &freeTree{leaves: leaves, room: make([]int, 2*leaves)}
	for i := range f.room {
		f.room[i] = seqLen
	}
	return f
}

// firstFit takes need positions from the first sequence with that much room and returns its
// index; there always is one (a fresh sequence holds any document Pack keeps).
func (f *freeTree) firstFit(need int) int {
	node := 1
	for node < f.leaves {
		if f.room[2*node] >= need {
			node = 2 * node
		} else {
			node = 2*node + 1
		}
	}
	f.room[node] -= need
	for parent := node / 2; parent >= 1; parent /= 2 {
		f.room[parent] = max(f.room[2*parent], f.room[2*parent+1])
	}
	return node - f.leaves
}
