package data

import (
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"slices"
)

// TokenizeOptions say how a data set of text becomes token ids (ReadTokenized).
type TokenizeOptions struct {
	Format    TextFormat
	Tokenizer Tokenizer
	// TokenizerSHA256 identifies the tokenizer (the hash of its files, HashFiles): equal hashes,
	// equal ids. The cache and checkpoints know the tokenizer by it.
	TokenizerSHA256 [32]byte
	// CacheDir, when set, is the folder of the tokenized data's cache (see cache.go): a data set
	// tokenized once is read back from it by the hashes of the data and the tokenizer.
	CacheDir string
	// Progress receives the tokenizing progress line and the cache's notes; nil: none.
	Progress io.Writer
}

// TokenizedText is a data set of text as token ids, with what identifies it.
type TokenizedText struct {
	*Tokenized
	// Source is the file or folder read, Kind what its records are (Documents.Kind).
	Source, Kind string
	// DataSHA256 is the data's hash (Documents.SHA256), TokenizerSHA256 the tokenizer's.
	DataSHA256, TokenizerSHA256 [32]byte
	Format                      TextFormat
	// CachePath is the cache file (empty without a cache); Cached says the ids were read from it.
	CachePath string
	Cached    bool
	// held describes which documents a Split kept ("" for all).
	held string
}

// ReadTokenized reads the data set of text at path (ReadDocuments) and tokenizes it (Tokenize),
// or reads its ids from the cache when an earlier run tokenized the same data with the same
// tokenizer. Every error of the data (ReadDocuments') comes before any tokenizing.
func ReadTokenized(path string, opts TokenizeOptions) (*TokenizedText, error) {
	if opts.Tokenizer == nil || opts.TokenizerSHA256 == [32]byte{} {
		return nil, fmt.Errorf("%s: text data needs a tokenizer and its hash (TokenizeOptions.Tokenizer, TokenizerSHA256)", path)
	}
	docs, err := ReadDocuments(path, opts.Format)
	if err != nil {
		return nil, err
	}
	t := &TokenizedText{Source: path, Kind: docs.Kind, DataSHA256: docs.SHA256, TokenizerSHA256: opts.TokenizerSHA256, Format: opts.Format}
	key := cacheKey(t.DataSHA256, t.TokenizerSHA256, opts.Format)
	if opts.CacheDir != "" {
		t.CachePath = cachePath(opts.CacheDir, key)
		if t.Tokenized = readCache(t.CachePath, key); t.Tokenized != nil && t.Documents() == len(docs.Docs) {
			t.Cached = true
			if opts.Progress != nil {
				fmt.Fprintf(opts.Progress, "tokenized %s read from %s\n", path, t.CachePath)
			}
			return t, nil
		}
	}
	if t.Tokenized, err = Tokenize(docs.Docs, opts.Tokenizer, opts.Progress, path); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if opts.CacheDir != "" {
		meta := map[string]string{"data": path, "data_sha256": fmt.Sprintf("%x", t.DataSHA256), "tokenizer_sha256": fmt.Sprintf("%x", t.TokenizerSHA256),
			"separator": opts.Format.Separator, "template": opts.Format.Template, "kind": t.Kind}
		if err := writeCache(t.CachePath, key, t.Tokenized, meta); err != nil && opts.Progress != nil {
			// A cache that cannot be written costs the next run a tokenizing, not this run its data.
			fmt.Fprintf(opts.Progress, "the tokenized data was not cached: %v\n", err)
			t.CachePath = ""
		}
	}
	return t, nil
}

// Split holds out share of the documents (in (0, 1), at least one, at most all but one), drawn
// with seed, for evaluation: it returns the documents kept for training and the ones held out,
// each in their original order.
func (t *TokenizedText) Split(share float64, seed uint64) (train, eval *TokenizedText, err error) {
	n := t.Documents()
	if !(share > 0 && share < 1) {
		return nil, nil, fmt.Errorf("an evaluation share of %g: hold out a share in (0, 1) of the documents, e.g. 0.05", share)
	}
	if n < 2 {
		return nil, nil, fmt.Errorf("%s has %d document: holding some out for evaluation needs at least 2", t.Source, n)
	}
	held := min(n-1, max(1, int(math.Round(share*float64(n)))))
	order := rand.New(rand.NewPCG(seed, 0xe7a1)).Perm(n)
	evalDocs, trainDocs := order[:held], order[held:]
	slices.Sort(evalDocs)
	slices.Sort(trainDocs)
	note := fmt.Sprintf("%d of %d documents held out (share %g, seed %d)", held, n, share, seed)
	train, eval = t.subset(trainDocs), t.subset(evalDocs)
	train.held, eval.held = "without the "+note, "the "+note
	return train, eval, nil
}

// subset is a TokenizedText of the given documents only.
func (t *TokenizedText) subset(docs []int) *TokenizedText {
	out := *t
	out.Tokenized = &Tokenized{Starts: []int64{0}}
	for _, i := range docs {
		ids, trained := t.Document(i)
		out.IDs = append(out.IDs, ids...)
		out.Trained = append(out.Trained, trained...)
		out.Starts = append(out.Starts, int64(len(out.IDs)))
	}
	return &out
}

// heldNote says which documents a Split kept: ", without the 3 of 60 documents held out (share
// 0.05, seed 42)"; "" for all of them.
func (t *TokenizedText) heldNote() string {
	if t.held == "" {
		return ""
	}
	return ", " + t.held
}

// describe names the data set and its hashes, for checkpoints.
func (t *TokenizedText) describe() string {
	s := fmt.Sprintf("%s %s sha256 %x", t.Kind, t.Source, t.DataSHA256)
	if t.Format.Separator != "" {
		s += fmt.Sprintf(" split on %q", t.Format.Separator)
	}
	s += fmt.Sprintf(", tokenizer sha256 %x", t.TokenizerSHA256)
	if t.held != "" {
		s += ", " + t.held
	}
	return s
}
