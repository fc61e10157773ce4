package data_test

import (
	"cmp"
	"crypto/sha256"
	"hash/fnv"
	"math/rand/v2"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/gomlx/gomlx/pkg/core/tensors"

	"github.com/onegpu/onegpu/data"
)

// byteTokenizer is a tokenizer for tests: each byte its own id (0-255), the special tokens
// written in the text 256, 257, ...; BOS is 256 + len(specials), EOS one more.
type byteTokenizer struct {
	specials []string
	calls    *atomic.Int64
	name     string
}

func newByteTokenizer(specials ...string) byteTokenizer {
	return byteTokenizer{specials: specials, calls: new(atomic.Int64), name: "bytes"}
}

func (b byteTokenizer) Encode(text string, addSpecial bool) []int {
	b.calls.Add(1)
	var ids []int
outer:
	for i := 0; i < len(text); {
		for k, s := range b.specials {
			if strings.HasPrefix(text[i:], s) {
				ids = append(ids, 256+k)
				i += len(s)
				continue outer
			}
		}
		ids = append(ids, int(text[i]))
		i++
	}
	return ids
}

func (b byteTokenizer) BOS() (int, bool) { return 256 + len(b.specials), true }
func (b byteTokenizer) EOSTokens() []int { return []int{257 + len(b.specials)} }
func (b byteTokenizer) sha256() [32]byte {
	return sha256.Sum256([]byte(b.name + strings.Join(b.specials, "\x00")))
}
func (b byteTokenizer) withName(n string) byteTokenizer { b.name = n; return b }

// wordTokenizer is a tokenizer for tests that merges across spaces as byte-level BPE does: a
// token is a run of non-spaces with the space before it; a space at the end is a token of its
// own. Ids are the words' hashes.
type wordTokenizer struct{}

func (wordTokenizer) Encode(text string, addSpecial bool) []int {
	var ids []int
	for start := 0; start < len(text); {
		end := start + 1
		for end < len(text) && text[end] != ' ' {
			end++
		}
		h := fnv.New32a()
		h.Write([]byte(text[start:end]))
		ids = append(ids, int(h.Sum32()%1000))
		start = end
	}
	return ids
}

func (wordTokenizer) BOS() (int, bool) { return 0, false }
func (wordTokenizer) EOSTokens() []int { return nil }

// TestTokenizeMarksTrainedPieces: a document's tokens carry the loss where their text starts in a
// trained piece; the BOS never does, the EOS always; special tokens written in the text are theirs.
func TestTokenizeMarksTrainedPieces(t *testing.T) {
	tok := newByteTokenizer("<|eot_id|>")
	docs := []data.Document{
		{Pieces: []data.Piece{{Text: "ab"}, {Text: "c<|eot_id|>", Trained: true}, {Text: ""}, {Text: "d"}}, BOS: true},
		{Pieces: []data.Piece{{Text: "xy", Trained: true}}, BOS: true, EOS: true},
	}
	got, err := data.Tokenize(docs, tok, nil, "test")
	if err != nil {
		t.Fatal(err)
	}
	bos, eos := int32(257), int32(258)
	want := &data.Tokenized{
		IDs:     []int32{bos, 'a', 'b', 'c', 256, 'd', bos, 'x', 'y', eos},
		Trained: []uint8{0, 0, 0, 1, 1, 0, 0, 1, 1, 1},
		Starts:  []int64{0, 6, 10},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("tokenized\n %+v\nwant\n %+v", got, want)
	}
	// A token that holds text of both sides of a change carries the loss.
	words, err := data.Tokenize([]data.Document{
		{Pieces: []data.Piece{{Text: "The capital is "}, {Text: "Paris", Trained: true}, {Text: " today"}}},
		{Pieces: []data.Piece{{Text: "x"}, {Text: "ab", Trained: true}, {Text: "c d"}}},
	}, wordTokenizer{}, nil, "test")
	if err != nil {
		t.Fatal(err)
	}
	// "The", " capital", " is", " Paris", " today"; "xabc", " d"
	if w := []uint8{0, 0, 0, 1, 0, 1, 0}; !reflect.DeepEqual(words.Trained, w) {
		t.Errorf("words' trained flags %v, want %v", words.Trained, w)
	}
}

// TestPackFirstFitDecreasing: Pack places documents as a plain first-fit decreasing does (every
// sequence scanned for each document), truncates documents longer than seq+1 tokens and skips
// those with nothing to learn, and its counts add up.
func TestPackFirstFitDecreasing(t *testing.T) {
	const seq = 64
	rng := rand.New(rand.NewPCG(1, 2))
	tk := &data.Tokenized{Starts: []int64{0}}
	for i := range 500 {
		n := 1 + rng.IntN(90)
		for j := range n {
			tk.IDs = append(tk.IDs, int32(j))
			flag := uint8(1)
			if i%50 == 7 || j < n/2 && i%3 == 0 { // some documents have nothing to learn; some learn their second half
				flag = 0
			}
			tk.Trained = append(tk.Trained, flag)
		}
		tk.Starts = append(tk.Starts, int64(len(tk.IDs)))
	}
	p, err := data.Pack(tk, seq)
	if err != nil {
		t.Fatal(err)
	}
	// The reference: the same documents, kept and truncated as documented, placed one by one.
	type item struct{ index, tokens int }
	var items []item
	var skipped, truncated int
	var dropped, positions, loss int64
	for i := range tk.Documents() {
		ids, trained := tk.Document(i)
		n := min(len(ids), seq+1)
		if n < 2 || !slices.Contains(trained[1:n], 1) {
			skipped++
			continue
		}
		if n < len(ids) {
			truncated++
			dropped += int64(len(ids) - n)
		}
		for _, f := range trained[1:n] {
			loss += int64(f)
		}
		positions += int64(n - 1)
		items = append(items, item{i, n})
	}
	slices.SortStableFunc(items, func(a, b item) int { return cmp.Compare(b.tokens, a.tokens) })
	var rows [][]data.PackedDocument
	var room []int
	for _, it := range items {
		r := slices.IndexFunc(room, func(free int) bool { return free >= it.tokens-1 })
		if r < 0 {
			r = len(rows)
			rows, room = append(rows, nil), append(room, seq)
		}
		rows[r] = append(rows[r], data.PackedDocument{Index: it.index, Tokens: it.tokens})
		room[r] -= it.tokens - 1
	}
	if !reflect.DeepEqual(p.Rows, rows) {
		t.Errorf("Pack's sequences differ from a plain first-fit decreasing's (%d vs %d sequences)", len(p.Rows), len(rows))
	}
	want := data.PackingStats{Packed: len(items), Skipped: skipped, Truncated: truncated, DroppedTokens: dropped, Positions: positions, LossTokens: loss}
	if p.PackingStats != want {
		t.Errorf("stats %+v, want %+v", p.PackingStats, want)
	}
	if truncated == 0 || skipped == 0 {
		t.Fatalf("the test data should truncate and skip some documents: %+v", want)
	}
	if e := p.Efficiency(); e != float64(positions)/float64(len(rows)*seq) || e < 0.9 {
		t.Errorf("efficiency %.4f: want the filled share of %d sequences, above 0.9 here", e, len(rows))
	}
	t.Logf("%s", p)
}

// TestPackedBatch: a prompt/completion document and a text share a sequence: each position's
// input, target, segment, position in its document and loss weight are as documented, and the
// rest is padding.
func TestPackedBatch(t *testing.T) {
	text := &data.TokenizedText{Source: "test", Kind: "test", Tokenized: &data.Tokenized{
		IDs:     []int32{1, 2, 3, 4, 5, 6, 7},
		Trained: []uint8{0, 0, 1, 1, 0, 1, 1}, // BOS, prompt, completion, EOS | BOS, text, EOS
		Starts:  []int64{0, 4, 7},
	}}
	d, err := data.NewPacked(text, 6, 1, 8, 0)
	if err != nil {
		t.Fatal(err)
	}
	b := d.Batch(0)
	got := [][]int32{tensors.MustCopyFlatData[int32](b[0]), tensors.MustCopyFlatData[int32](b[1]), tensors.MustCopyFlatData[int32](b[2]),
		tensors.MustCopyFlatData[int32](b[3])}
	want := [][]int32{{1, 2, 3, 5, 6, 0}, {2, 3, 4, 6, 7, 0}, {1, 1, 1, 2, 2, 0}, {0, 1, 2, 0, 1, 0}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("tokens, targets, segments, positions\n %v\nwant\n %v", got, want)
	}
	if w := tensors.MustCopyFlatData[float32](b[4]); !reflect.DeepEqual(w, []float32{0, 1, 1, 1, 1, 0}) {
		t.Errorf("weights %v, want [0 1 1 1 1 0]", w)
	}
	if e := d.Packing().Efficiency(); e != 5.0/6 {
		t.Errorf("efficiency %g, want 5/6", e)
	}
	if _, err := data.NewPacked(text, 6, 1, 7, 0); err == nil || !strings.Contains(err.Error(), "token id 7 (document 2)") {
		t.Errorf("an id outside the vocabulary: %v", err)
	}
}

// TestPackedEvalBatches: evaluation batches hold every sequence once, in order, the last one
// padded with rows that carry no loss; training batches cycle through a seeded order.
func TestPackedEvalBatches(t *testing.T) {
	tk := &data.Tokenized{Starts: []int64{0}}
	for i := range 5 { // five documents of 9 tokens: one a sequence of 8
		for j := range 9 {
			tk.IDs = append(tk.IDs, int32(10*i+j))
			tk.Trained = append(tk.Trained, 1)
		}
		tk.Starts = append(tk.Starts, int64(len(tk.IDs)))
	}
	d, err := data.NewPacked(&data.TokenizedText{Source: "test", Tokenized: tk}, 8, 2, 50, 3)
	if err != nil {
		t.Fatal(err)
	}
	if d.Sequences() != 5 || d.EvalBatches() != 3 {
		t.Fatalf("%d sequences in %d evaluation batches, want 5 in 3", d.Sequences(), d.EvalBatches())
	}
	var firsts []int32
	for i := range d.EvalBatches() {
		b := d.EvalBatch(i)
		tokens, weights := tensors.MustCopyFlatData[int32](b[0]), tensors.MustCopyFlatData[float32](b[4])
		for r := range 2 {
			firsts = append(firsts, tokens[8*r])
			if sum := slices.Max(weights[8*r : 8*r+8]); (sum == 0) != (i == 2 && r == 1) {
				t.Errorf("batch %d row %d: weights %v", i, r, weights[8*r:8*r+8])
			}
		}
	}
	if want := []int32{0, 10, 20, 30, 40, 0}; !reflect.DeepEqual(firsts, want) {
		t.Errorf("evaluation rows start with %v, want %v", firsts, want)
	}
	seen := map[int32]int{}
	for step := range 5 { // 10 rows: every sequence twice
		for r, v := range tensors.MustCopyFlatData[int32](d.Batch(step)[0]) {
			if r%8 == 0 {
				seen[v]++
			}
		}
	}
	if len(seen) != 5 || seen[0] != 2 || seen[40] != 2 {
		t.Errorf("5 training batches of 2 saw the sequences %v times, want each twice", seen)
	}
}

// TestReadTokenizedCache: the second read of the same data with the same tokenizer comes from
// the cache without tokenizing, with the same ids; another tokenizer or format tokenizes again.
func TestReadTokenizedCache(t *testing.T) {
	path := writeFile(t, "notes.jsonl", `{"prompt": "a", "completion": "b"}`+"\n"+`{"prompt": "cd", "completion": "e"}`)
	cache := filepath.Join(t.TempDir(), "cache")
	tok := newByteTokenizer()
	first, err := data.ReadTokenized(path, data.TokenizeOptions{Tokenizer: tok, TokenizerSHA256: tok.sha256(), CacheDir: cache})
	if err != nil {
		t.Fatal(err)
	}
	if first.Cached || tok.calls.Load() != 4 { // each document and its prompt
		t.Fatalf("first read: cached %v after %d encodings", first.Cached, tok.calls.Load())
	}
	again, err := data.ReadTokenized(path, data.TokenizeOptions{Tokenizer: tok, TokenizerSHA256: tok.sha256(), CacheDir: cache})
	if err != nil {
		t.Fatal(err)
	}
	if !again.Cached || tok.calls.Load() != 4 || !reflect.DeepEqual(again.Tokenized, first.Tokenized) || again.CachePath != first.CachePath {
		t.Errorf("second read: cached %v, %d encodings, same ids %v", again.Cached, tok.calls.Load(), reflect.DeepEqual(again.Tokenized, first.Tokenized))
	}
	other := newByteTokenizer().withName("other")
	if o, err := data.ReadTokenized(path, data.TokenizeOptions{Tokenizer: other, TokenizerSHA256: other.sha256(), CacheDir: cache}); err != nil || o.Cached || o.CachePath == first.CachePath {
		t.Errorf("another tokenizer: cached %v (%v)", o != nil && o.Cached, err)
	}
}

// TestSplit: a share of the documents is held out, drawn by the seed, the rest kept, each in
// order; the records of the two parts differ.
func TestSplit(t *testing.T) {
	tk := &data.Tokenized{Starts: []int64{0}}
	for i := range 20 {
		tk.IDs, tk.Trained = append(tk.IDs, int32(i), int32(i)), append(tk.Trained, 1, 1)
		tk.Starts = append(tk.Starts, int64(len(tk.IDs)))
	}
	text := &data.TokenizedText{Source: "test", Kind: "text", Tokenized: tk}
	train, eval, err := text.Split(0.25, 7)
	if err != nil {
		t.Fatal(err)
	}
	if train.Documents() != 15 || eval.Documents() != 5 {
		t.Fatalf("%d kept, %d held out; want 15 and 5", train.Documents(), eval.Documents())
	}
	var all []int32
	for i := 0; i < len(train.IDs); i += 2 {
		all = append(all, train.IDs[i])
	}
	for i := 0; i < len(eval.IDs); i += 2 {
		all = append(all, eval.IDs[i])
	}
	slices.Sort(all)
	if len(slices.Compact(all)) != 20 {
		t.Errorf("the parts do not hold every document once: %v", all)
	}
	_, again, _ := text.Split(0.25, 7)
	_, other, _ := text.Split(0.25, 8)
	if !reflect.DeepEqual(again.IDs, eval.IDs) || reflect.DeepEqual(other.IDs, eval.IDs) {
		t.Error("the held-out documents do not follow the seed")
	}
	a, _ := data.NewPacked(train, 4, 1, 20, 0)
	b, _ := data.NewPacked(eval, 4, 1, 20, 0)
	if a.Record() == b.Record() {
		t.Errorf("both parts record %q", a.Record())
	}
	if _, _, err := text.Split(1, 0); err == nil {
		t.Error("a share of 1 was accepted")
	}
}
