package tokenizer

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"
)

// modelJSON is a BPE model's fields.
type modelJSON struct {
	Type                    string           `json:"type"`
	Dropout                 *float64         `json:"dropout"`
	UnkToken                *string          `json:"unk_token"`
	ContinuingSubwordPrefix *string          `json:"continuing_subword_prefix"`
	EndOfWordSuffix         *string          `json:"end_of_word_suffix"`
	FuseUnk                 bool             `json:"fuse_unk"`
	ByteFallback            bool             `json:"byte_fallback"`
	IgnoreMerges            bool             `json:"ignore_merges"`
	Vocab                   map[string]int32 `json:"vocab"`
	Merges                  json.RawMessage  `json:"merges"`
}

func parseModel(raw json.RawMessage, path string, byteLevel bool) (*bpe, error) {
	if isNull(raw) {
		return nil, fmt.Errorf("%s: no model", path)
	}
	var c component
	if err := decodeAt(raw, path, &c); err != nil {
		return nil, err
	}
	if c.Type != "BPE" && c.Type != "" {
		return nil, unsupported(path, "model", c.Type, "BPE models")
	}
	var v modelJSON
	if err := decodeAt(raw, path, &v); err != nil {
		return nil, err
	}
	switch {
	case v.Type == "" && v.Merges == nil:
		return nil, fmt.Errorf("%s: no \"type\", and no merges: not a BPE model", path)
	case v.Dropout != nil && *v.Dropout != 0:
		return nil, fmt.Errorf("%s.dropout: %v: BPE dropout (random merges) is not supported", path, *v.Dropout)
	case v.ContinuingSubwordPrefix != nil && *v.ContinuingSubwordPrefix != "":
		return nil, fmt.Errorf("%s.continuing_subword_prefix: %q is not supported", path, *v.ContinuingSubwordPrefix)
	case v.EndOfWordSuffix != nil && *v.EndOfWordSuffix != "":
		return nil, fmt.Errorf("%s.end_of_word_suffix: %q is not supported", path, *v.EndOfWordSuffix)
	case len(v.Vocab) == 0:
		return nil, fmt.Errorf("%s.vocab: empty", path)
	}
	merges, err := parseMerges(v.Merges, path+".merges")
	if err != nil {
		return nil, err
	}
	m, err := newBPE(v.Vocab, merges, byteLevel)
	if err != nil {
		return nil, fmt.Errorf("%s.%v", path, err)
	}
	m.ignoreMerges, m.fuseUnk = v.IgnoreMerges, v.FuseUnk
	if v.ByteFallback {
		m.setByteFallback()
	}
	if v.UnkToken != nil {
		id, ok := v.Vocab[*v.UnkToken]
		if !ok {
			return nil, fmt.Errorf("%s.unk_token: %q is not in the vocabulary", path, *v.UnkToken)
		}
		m.unk = id
	}
	return m, nil
}

// parseMerges reads merges as pairs (["a", "b"], today's format) or as "a b" strings (before
// tokenizers 0.20).
func parseMerges(raw json.RawMessage, path string) ([][2]string, error) {
	if isNull(raw) {
		return nil, nil
	}
	var pairs [][]string
	if err := json.Unmarshal(raw, &pairs); err == nil {
		out := make([][2]string, len(pairs))
		for i, p := range pairs {
			if len(p) != 2 {
				return nil, fmt.Errorf("%s[%d]: %d strings, want a pair", path, i, len(p))
			}
			out[i] = [2]string{p[0], p[1]}
		}
		return out, nil
	}
	var lines []string
	if err := decodeAt(raw, path, &lines); err != nil {
		return nil, fmt.Errorf("%v (want pairs of strings or \"a b\" strings)", err)
	}
	out := make([][2]string, 0, len(lines))
	for i, l := range lines {
		if strings.HasPrefix(l, "#version") { // merges.txt's header, which the reference skips
			continue
		}
		parts := strings.Split(l, " ")
		if len(parts) != 2 {
			return nil, fmt.Errorf("%s[%d]: %q is not two tokens separated by one space", path, i, l)
		}
		out = append(out, [2]string{parts[0], parts[1]})
	}
	return out, nil
}

// parseAdded assigns the added tokens their ids as the reference does (a token already in the
// model's vocabulary keeps its id there; a new one takes the next free id after the vocabulary,
// in file order) and checks them against the ids the file states: a file where they differ would
// be encoded differently from what it says.
func parseAdded(list []addedJSON, m *bpe, norm normalizer) ([]*addedToken, error) {
	next := len(m.vocab)
	byContent := map[string]*addedToken{}
	var out []*addedToken
	for i, a := range list {
		path := fmt.Sprintf("added_tokens[%d]", i)
		if a.Content == "" {
			continue // the reference ignores an empty token
		}
		normalized := !a.Special // the reference's default
		if a.Normalized != nil {
			normalized = *a.Normalized
		}
		t := &addedToken{content: a.Content, special: a.Special, lstrip: a.LStrip, rstrip: a.RStrip,
			singleWord: a.SingleWord, normalized: normalized}
		old, dup := byContent[a.Content]
		switch {
		case dup:
			t.id = old.id
		default:
			if id, ok := m.vocab[a.Content]; ok {
				t.id = int(id)
			} else {
				t.id = next
				next++
			}
		}
		if t.id != a.ID {
			return nil, fmt.Errorf("%s: %q has id %d in the file, but the tokenizers library gives it %d (the model's vocabulary holds %d tokens)", path, a.Content, a.ID, t.id, len(m.vocab))
		}
		if normalized && norm != nil {
			if s := norm.normalize(a.Content); s != a.Content {
				t.normalizedContent = s
			}
		}
		if dup { // a later entry with the same content replaces the earlier's settings
			*old = *t
			continue
		}
		byContent[a.Content] = t
		out = append(out, t)
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].id < out[j].id })
	return out, nil
}
