package data

import (
	"fmt"
	"io"
	"math"
	"runtime"
	"sync"
	"sync/atomic"

	"github.com/onegpu/onegpu/internal/progress"
)

// Tokenizer is what text data needs of a tokenizer: *tokenizer.Tokenizer has these methods. They
// must be safe for concurrent use: documents are tokenized in parallel.
type Tokenizer interface {
	// Encode returns the token ids of text, the special tokens written in it (e.g. "<|eot_id|>")
	// as their ids; addSpecial adds the post-processor's tokens (text data asks for none, and adds
	// BOS and EOS itself).
	Encode(text string, addSpecial bool) []int
	// BOS is the id a document starts with (Document.BOS); ok is false when the tokenizer has none.
	BOS() (id int, ok bool)
	// EOSTokens are the ids that end a text; the first ends a document (Document.EOS), none when
	// empty.
	EOSTokens() []int
}

// Tokenized is a data set as token ids: each document's ids and, per token, whether predicting it
// carries the loss.
type Tokenized struct {
	// IDs holds the documents' ids end to end; Starts[i] is where document i starts in it, and
	// Starts[len(Starts)-1] = len(IDs).
	IDs    []int32
	Starts []int64
	// Trained[j] is 1 when token j is a target the loss counts (a completion's, an assistant's, a
	// text's, an added EOS), 0 when it is only read (a prompt's, a BOS).
	Trained []uint8
}

// Documents is the number of documents.
func (t *Tokenized) Documents() int { return len(t.Starts) - 1 }

// Document returns document i's ids and trained flags.
func (t *Tokenized) Document(i int) (ids []int32, trained []uint8) {
	a, b := t.Starts[i], t.Starts[i+1]
	return t.IDs[a:b], t.Trained[a:b]
}

// Tokenize encodes the documents with tok, in parallel, drawing a progress line on progress (nil:
// none). Each document's text is encoded whole, so that its ids are those the tokenizer gives the
// text (what transformers gives the rendered chat template), and a token carries the loss when it
// holds text of a trained piece (see trainedSplit). It returns an error naming a document whose
// ids do not fit in int32.
func Tokenize(docs []Document, tok Tokenizer, progressTo io.Writer, what string) (*Tokenized, error) {
	type result struct {
		ids     []int32
		trained []uint8
	}
	results := make([]result, len(docs))
	bar := progress.NewLine(progressTo, "tokenizing "+what, len(docs))
	var next, done, tokens atomic.Int64
	var firstErr error
	var errOnce sync.Once
	var wg sync.WaitGroup
	for range max(1, runtime.GOMAXPROCS(0)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= len(docs) {
					return
				}
				ids, trained, err := tokenizeDocument(docs[i], tok)
				if err != nil {
					errOnce.Do(func() { firstErr = fmt.Errorf("tokenizing document %d: %w", i+1, err) })
					next.Store(int64(len(docs)))
					return
				}
				results[i] = result{ids, trained}
				n := tokens.Add(int64(len(ids)))
				bar.Show(int(done.Add(1)), fmt.Sprintf("documents, %s tokens", countString(n)))
			}
		}()
	}
	wg.Wait()
	if firstErr != nil {
		return nil, firstErr
	}
	bar.Done(fmt.Sprintf("documents, %s tokens", countString(tokens.Load())))
	t := &Tokenized{Starts: make([]int64, 0, len(docs)+1), IDs: make([]int32, 0, tokens.Load()), Trained: make([]uint8, 0, tokens.Load())}
	for _, r := range results {
		t.Starts = append(t.Starts, int64(len(t.IDs)))
		t.IDs = append(t.IDs, r.ids...)
		t.Trained = append(t.Trained, r.trained...)
	}
	t.Starts = append(t.Starts, int64(len(t.IDs)))
	return t, nil
}

// tokenizeDocument encodes one document's text and marks the tokens that hold text of its trained
// pieces, with the tokenizer's BOS and EOS around it as the document asks.
func tokenizeDocument(d Document, tok Tokenizer) ([]int32, []uint8, error) {
	text := d.Text()
	ids := tok.Encode(text, false)
	flags := make([]uint8, len(ids))
	// Walk the pieces; at each change of Trained, find where the tokens change.
	from, at, trained, started := 0, 0, false, false
	for _, p := range d.Pieces {
		if p.Text == "" {
			continue
		}
		if started && p.Trained != trained {
			split := trainedSplit(tok, text[:at], ids, trained)
			split = max(split, from)
			fill(flags[from:split], trained)
			from = split
		}
		trained, started = p.Trained, true
		at += len(p.Text)
	}
	fill(flags[from:], trained)
	var outIDs []int32
	var outFlags []uint8
	if bos, ok := tok.BOS(); d.BOS && ok {
		outIDs, outFlags = append(outIDs, int32(bos)), append(outFlags, 0)
	}
	for j, id := range ids {
		if id < 0 || id > math.MaxInt32 {
			return nil, nil, fmt.Errorf("token id %d does not fit in int32", id)
		}
		outIDs, outFlags = append(outIDs, int32(id)), append(outFlags, flags[j])
	}
	if eos := tok.EOSTokens(); d.EOS && len(eos) > 0 {
		outIDs, outFlags = append(outIDs, int32(eos[0])), append(outFlags, 1)
	}
	return outIDs, outFlags, nil
}

// trainedSplit returns the index of the first token of ids (the whole text's) that belongs after
// prefix, a prefix of the text ending where the pieces change from trained (wasTrained) or to
// it. The tokens the prefix's own encoding shares with the whole text's lie within it; the next
// one starts in it when the prefix ends inside a word the tokenizer merges across the change: such
// a token holds text of both sides and carries the loss. Where the change falls on a split the
// tokenizer makes anyway (after a newline or a special token, as the chat templates write them),
// the prefix's ids are a prefix of the text's and the split is exact.
func trainedSplit(tok Tokenizer, prefix string, ids []int, wasTrained bool) int {
	head := tok.Encode(prefix, false)
	shared := 0
	for shared < len(head) && shared < len(ids) && head[shared] == ids[shared] {
		shared++
	}
	if shared < len(head) && wasTrained && shared < len(ids) {
		return shared + 1 // the token across the change holds trained text
	}
	return shared
}

// fill sets flags to 1 where trained.
func fill(flags []uint8, trained bool) {
	if trained {
		for i := range flags {
			flags[i] = 1
		}
	}
}

// countString writes a count with a k or M suffix.
func countString(n int64) string {
	switch {
	case n >= 10_000_000:
		return fmt.Sprintf("%.0fM", float64(n)/1e6)
	case n >= 1_000_000:
		return fmt.Sprintf("%.1fM", float64(n)/1e6)
	case n >= 10_000:
		return fmt.Sprintf("%.0fk", float64(n)/1e3)
	}
	return fmt.Sprint(n)
}
