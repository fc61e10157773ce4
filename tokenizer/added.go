package tokenizer

import (
	"sort"
	"unicode"
	"unicode/utf8"
)

// addedToken is one of tokenizer.json's added_tokens: matched in the text before the model sees
// it, as the reference's AddedVocabulary does.
type addedToken struct {
	content string
	id      int
	// special tokens are skipped by Decode with skipSpecial; normalized ones are matched in the
	// normalized text, by their normalizedContent when the normalizer changes them.
	special, normalized        bool
	lstrip, rstrip, singleWord bool
	normalizedContent          string
}

// decoded is the token's text as Decode hands it to the decoder: the normalized form when there
// is one (the reference's simple_id_to_token).
func (t *addedToken) decoded() string {
	if t.normalizedContent != "" {
		return t.normalizedContent
	}
	return t.content
}

// matcher finds added tokens in text: leftmost, then longest (a byte trie; the reference uses an
// Aho-Corasick automaton with the same semantics).
type matcher struct {
	nodes []trieNode
	start [256]bool // whether some token starts with the byte
}

type trieNode struct {
	next  []trieEdge // sorted by byte
	token *addedToken
}

type trieEdge struct {
	b    byte
	node int32
}

// newMatcher returns a matcher of tokens by key (their content or normalized content), or nil
// when there are none.
func newMatcher(tokens []*addedToken, key func(*addedToken) string) *matcher {
	if len(tokens) == 0 {
		return nil
	}
	m := &matcher{nodes: []trieNode{{}}}
	for _, t := range tokens {
		k := key(t)
		n := int32(0)
		for i := 0; i < len(k); i++ {
			n = m.child(n, k[i])
		}
		m.nodes[n].token = t
		m.start[k[0]] = true
	}
	return m
}

func (m *matcher) child(n int32, b byte) int32 {
	edges := m.nodes[n].next
	i := sort.Search(len(edges), func(i int) bool { return edges[i].b >= b })
	if i < len(edges) && edges[i].b == b {
		return edges[i].node
	}
	m.nodes = append(m.nodes, trieNode{})
	c := int32(len(m.nodes) - 1)
	edges = append(edges, trieEdge{})
	copy(edges[i+1:], edges[i:])
	edges[i] = trieEdge{b, c}
	m.nodes[n].next = edges
	return c
}

// longest returns the longest token that s starts with, and its length.
func (m *matcher) longest(s string) (*addedToken, int) {
	var best *addedToken
	n, length := int32(0), 0
	for i := 0; i < len(s); i++ {
		edges := m.nodes[n].next
		next := int32(-1)
		for _, e := range edges {
			if e.b == s[i] {
				next = e.node
				break
			}
		}
		if next < 0 {
			break
		}
		n = next
		if t := m.nodes[n].token; t != nil {
			best, length = t, i+1
		}
	}
	return best, length
}

// split cuts s into added tokens and the text between them, as the reference's find_matches: a
// single_word token must not touch a word character (\w) on either side, lstrip and rstrip
// tokens take the whitespace before and after them along. emit gets each piece in order, with
// its token (nil for text).
func (m *matcher) split(s string, first bool, emit func(text string, tok *addedToken, first bool)) {
	if m == nil {
		if s != "" {
			emit(s, nil, first)
		}
		return
	}
	done := 0 // where the last match ended
	for i := 0; i < len(s); {
		if !m.start[s[i]] {
			i++
			continue
		}
		t, n := m.longest(s[i:])
		if t == nil {
			i++
			continue
		}
		start, stop := i, i+n
		i = stop // the search goes on after the match, whatever becomes of it below
		if t.singleWord && (start > 0 && endsWithWord(s[:start]) || stop < len(s) && startsWithWord(s[stop:])) {
			continue
		}
		if t.lstrip {
			start = max(trailingSpaceStart(s[:start]), done)
		}
		if t.rstrip {
			stop += leadingSpaceLen(s[stop:])
		}
		if done < start {
			emit(s[done:start], nil, first && done == 0)
		}
		emit(s[start:stop], t, first && start == 0)
		done = stop
	}
	if done < len(s) {
		emit(s[done:], nil, first && done == 0)
	}
}

func endsWithWord(s string) bool {
	r, _ := utf8.DecodeLastRuneInString(s)
	return unicode.Is(classWord, r)
}

func startsWithWord(s string) bool {
	r, _ := utf8.DecodeRuneInString(s)
	return unicode.Is(classWord, r)
}

// trailingSpaceStart returns where the whitespace that ends s starts (len(s) when none).
func trailingSpaceStart(s string) int {
	for len(s) > 0 {
		r, w := utf8.DecodeLastRuneInString(s)
		if !unicode.Is(classSpace, r) {
			break
		}
		s = s[:len(s)-w]
	}
	return len(s)
}

// leadingSpaceLen returns the length of the whitespace that starts s.
func leadingSpaceLen(s string) int {
	n := 0
	for n < len(s) {
		r, w := utf8.DecodeRuneInString(s[n:])
		if !unicode.Is(classSpace, r) {
			break
		}
		n += w
	}
	return n
}
