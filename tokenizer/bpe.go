package tokenizer

import (
	"fmt"
	"unicode/utf8"
)

// bpe is the BPE model: the vocabulary, the merges by rank, how a character missing from the
// vocabulary is handled (byte fallback, unknown token) and a cache of each word's ids.
type bpe struct {
	vocab  map[string]int32
	tokens []string // by id; "" for ids the vocabulary does not use
	merges pairTable

	// byteLevel: words are raw bytes, each byte standing for its byte-level character (the
	// ByteLevel pre-tokenizer's output) and byteSymbol holds those characters' ids (-1: missing).
	byteLevel  bool
	byteSymbol [256]int32
	// rawVocab maps the bytes of each byte-level token to its id, for ignoreMerges.
	rawVocab map[string]int32

	// Otherwise words are characters: runeSymbol holds the ids of one-character tokens, and a
	// missing character falls back to its bytes' <0xNN> tokens (byteFallback) or to unk.
	runeSymbol   map[rune]int32
	byteFallback bool
	fallback     [256]int32
	unk          int32 // -1: none (a missing character is dropped, as the reference does)
	fuseUnk      bool

	ignoreMerges bool

	cache wordCache
}

// newBPE builds the model from its vocabulary and merges (pairs of token strings, by rank).
// merges' errors name the pair's index.
func newBPE(vocab map[string]int32, merges [][2]string, byteLevel bool) (*bpe, error) {
	m := &bpe{vocab: vocab, byteLevel: byteLevel, unk: -1}
	maxID := int32(-1)
	for _, id := range vocab {
		maxID = max(maxID, id)
	}
	m.tokens = make([]string, maxID+1)
	for t, id := range vocab {
		if id < 0 {
			return nil, fmt.Errorf("vocab: token %q has the negative id %d", t, id)
		}
		m.tokens[id] = t
	}
	m.merges = newPairTable(len(merges))
	for i, p := range merges {
		a, okA := vocab[p[0]]
		b, okB := vocab[p[1]]
		id, okM := vocab[p[0]+p[1]]
		switch {
		case !okA:
			return nil, fmt.Errorf("merges[%d]: %q is not in the vocabulary", i, p[0])
		case !okB:
			return nil, fmt.Errorf("merges[%d]: %q is not in the vocabulary", i, p[1])
		case !okM:
			return nil, fmt.Errorf("merges[%d]: their merge %q is not in the vocabulary", i, p[0]+p[1])
		}
		m.merges.put(a, b, merge{rank: int32(i), id: id})
	}
	if byteLevel {
		m.rawVocab = make(map[string]int32, len(vocab))
		for t, id := range vocab {
			if raw, ok := byteLevelBytes(t); ok {
				m.rawVocab[string(raw)] = id
			}
		}
		for b := range m.byteSymbol {
			m.byteSymbol[b] = -1
			if id, ok := vocab[string(byteChar[b])]; ok {
				m.byteSymbol[b] = id
			}
		}
	} else {
		m.runeSymbol = map[rune]int32{}
		for t, id := range vocab {
			if r, w := utf8.DecodeRuneInString(t); w == len(t) && w > 0 {
				m.runeSymbol[r] = id
			}
		}
	}
	return m, nil
}

// token returns the vocabulary's token of id.
func (m *bpe) token(id int) (string, bool) {
	if id < 0 || id >= len(m.tokens) {
		return "", false
	}
	if t := m.tokens[id]; t != "" {
		return t, true
	}
	v, ok := m.vocab[""]
	return "", ok && int(v) == id
}

// setByteFallback turns byte fallback on: every <0xNN> token must exist then.
func (m *bpe) setByteFallback() error {
	m.byteFallback = true
	for b := range m.fallback {
		m.fallback[b] = -1
		if id, ok := m.vocab[fmt.Sprintf("<0x%02X>", b)]; ok {
			m.fallback[b] = id
		}
	}
	return nil
}

// appendWord appends the ids of one pre-token to ids.
func (m *bpe) appendWord(ids []int, word string) []int {
	if word == "" {
		return ids
	}
	cacheable := len(word) < cacheMaxWord
	if cacheable {
		if hit, ok := m.cache.get(word); ok {
			for _, id := range hit {
				ids = append(ids, int(id))
			}
			return ids
		}
	}
	var out []int32
	if id, ok := m.whole(word); ok {
		out = []int32{id}
	} else {
		out = m.mergeWord(word)
	}
	if cacheable {
		m.cache.put(word, out)
	}
	for _, id := range out {
		ids = append(ids, int(id))
	}
	return ids
}

// whole returns the id of the word itself when ignore_merges is set and it is in the vocabulary.
func (m *bpe) whole(word string) (int32, bool) {
	if !m.ignoreMerges {
		return 0, false
	}
	if m.byteLevel {
		id, ok := m.rawVocab[word]
		return id, ok
	}
	id, ok := m.vocab[word]
	return id, ok
}

// symbol is one token of a word being merged, in a list linked by index; len 0 marks a symbol
// merged into its left neighbour.
type symbol struct {
	id, prev, next, len int32
}

// mergeWord splits word into its initial symbols and applies the merges as the reference does:
// a min-heap of candidate merges by (rank, position); a popped candidate whose pair has changed
// since (its merge's new id differs) is dropped.
func (m *bpe) mergeWord(word string) []int32 {
	syms := m.symbols(word)
	var h mergeHeap
	for i := 0; i+1 < len(syms); i++ {
		if mg, ok := m.merges.get(syms[i].id, syms[i+1].id); ok {
			h.push(candidate{mg.rank, int32(i), mg.id})
		}
	}
	for len(h) > 0 {
		top := h.pop()
		cur := &syms[top.pos]
		if cur.len == 0 || cur.next == -1 {
			continue
		}
		next := cur.next
		right := syms[next]
		if mg, ok := m.merges.get(cur.id, right.id); !ok || mg.id != top.id {
			continue
		}
		cur.id, cur.len, cur.next = top.id, cur.len+right.len, right.next
		syms[next].len = 0
		if right.next > -1 && int(right.next) < len(syms) {
			syms[right.next].prev = top.pos
		}
		if cur.prev >= 0 {
			if mg, ok := m.merges.get(syms[cur.prev].id, cur.id); ok {
				h.push(candidate{mg.rank, cur.prev, mg.id})
			}
		}
		if cur.next >= 0 && int(cur.next) < len(syms) {
			if mg, ok := m.merges.get(cur.id, syms[cur.next].id); ok {
				h.push(candidate{mg.rank, top.pos, mg.id})
			}
		}
	}
	out := make([]int32, 0, len(syms))
	for _, s := range syms {
		if s.len != 0 {
			out = append(out, s.id)
		}
	}
	return out
}

// symbols returns word's initial symbols, as the reference's merge_word makes them: one per
// character (per byte for byte-level words), and for a character missing from the vocabulary its
// bytes' <0xNN> tokens (byte_fallback), else the unknown token (consecutive ones fused into one
// with fuse_unk), else nothing: the character is dropped. As in the reference, an unknown token
// waiting to be fused is only added at the next known character, after any byte tokens between.
func (m *bpe) symbols(word string) []symbol {
	syms := make([]symbol, 0, len(word))
	add := func(id int32, n int) {
		prev := int32(len(syms) - 1)
		if prev >= 0 {
			syms[prev].next = prev + 1
		}
		syms = append(syms, symbol{id: id, prev: prev, next: -1, len: int32(n)})
	}
	unkLen := 0
	flushUnk := func() {
		if unkLen > 0 {
			add(m.unk, unkLen)
			unkLen = 0
		}
	}
	for i := 0; i < len(word); {
		id, w, char := int32(-1), 1, ""
		if m.byteLevel {
			if id = m.byteSymbol[word[i]]; id < 0 {
				char = string(byteChar[word[i]])
			}
		} else {
			var r rune
			r, w = utf8.DecodeRuneInString(word[i:])
			var ok bool
			if id, ok = m.runeSymbol[r]; !ok {
				id, char = -1, word[i:i+w]
			}
		}
		i += w
		switch {
		case id >= 0:
			flushUnk()
			add(id, w)
		case m.byteFallback && m.hasFallback(char):
			for j := 0; j < len(char); j++ {
				add(m.fallback[char[j]], 1)
			}
		case m.unk >= 0:
			if unkLen > 0 && !m.fuseUnk {
				flushUnk()
			}
			unkLen += w
		}
	}
	flushUnk()
	return syms
}

func (m *bpe) hasFallback(char string) bool {
	for j := 0; j < len(char); j++ {
		if m.fallback[char[j]] < 0 {
			return false
		}
	}
	return true
}
