package data

import (
	"fmt"
	"io"
	"runtime"
	"sync"
	"sync/atomic"

	"github.com/onegpu/onegpu/internal/progress"
)

// Tokenizer is what text data needs of a tokenizer (cmd/onegpu adapts tokenizer.Tokenizer to
// it). Its methods must be safe for concurrent use: documents are tokenized in parallel.
type Tokenizer interface {
	// Encode returns the token ids of text, the special tokens written in it (e.g. "<|eot_id|>")
	// as their ids and no token added (no BOS), and for each token the byte offset in text where
	// its text starts (non-decreasing; a token that starts inside a trained piece carries the
	// loss).
	Encode(text string) (ids []int32, starts []int, err error)
	// BOS and EOS are the ids a document starts and ends with (Document.BOS and EOS), or -1 for
	// a tokenizer that has none.
	BOS() int32
	EOS() int32
	// SHA256 identifies the tokenizer: equal hashes, equal ids (the hash of its files).
	SHA256() [32]byte
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
// none). Each document is encoded whole, so that its ids are those the tokenizer gives its text;
// a token carries the loss when its text starts in a trained piece. It returns the first error
// of the tokenizer, naming the document.
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

// tokenizeDocument encodes one document's text and marks the tokens that start in its trained
// pieces, with the tokenizer's BOS and EOS around it as the document asks.
func tokenizeDocument(d Document, tok Tokenizer) ([]int32, []uint8, error) {
	text := d.Text()
	ids, starts, err := tok.Encode(text)
	if err != nil {
		return nil, nil, err
	}
	if len(starts) != len(ids) {
		return nil, nil, fmt.Errorf("the tokenizer gave %d ids and %d offsets", len(ids), len(starts))
	}
	var outIDs []int32
	var trained []uint8
	if bos := tok.BOS(); d.BOS && bos >= 0 {
		outIDs, trained = append(outIDs, bos), append(trained, 0)
	}
	piece, end := 0, 0 // the piece holding offset `end`-ish: pieces ends, walked as offsets grow
	if len(d.Pieces) > 0 {
		end = len(d.Pieces[0].Text)
	}
	for j, id := range ids {
		for piece < len(d.Pieces)-1 && starts[j] >= end {
			piece++
			end += len(d.Pieces[piece].Text)
		}
		flag := uint8(0)
		if len(d.Pieces) > 0 && d.Pieces[piece].Trained {
			flag = 1
		}
		outIDs, trained = append(outIDs, id), append(trained, flag)
	}
	if eos := tok.EOS(); d.EOS && eos >= 0 {
		outIDs, trained = append(outIDs, eos), append(trained, 1)
	}
	return outIDs, trained, nil
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
