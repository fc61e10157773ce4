package tokenizer

import "strings"

// piece is a stretch of text on its way to the model. first says whether it starts where the
// input starts, which Metaspace's prepend_scheme "first" looks at (the reference asks whether the
// piece's offset in the original text is 0). A piece cut from a normalized one counts as first
// when it starts at the normalized piece's start; the reference would also count one that starts
// after characters a normalizer inserted at the very start (no published tokenizer pairs such a
// normalizer with a splitter before Metaspace).
type piece struct {
	text  string
	first bool
}

// A preTokenizer splits a piece into smaller ones (words), possibly rewriting them, and hands
// each non-empty one to emit in order.
type preTokenizer interface {
	split(p piece, emit func(piece))
}

// behavior is what a Split does with the pattern's matches.
type behavior int

const (
	removed behavior = iota
	isolated
	mergedWithPrevious
	mergedWithNext
	contiguous
)

var behaviors = map[string]behavior{"Removed": removed, "Isolated": isolated,
	"MergedWithPrevious": mergedWithPrevious, "MergedWithNext": mergedWithNext, "Contiguous": contiguous}

// splitter is the Split pre-tokenizer (and the regex part of ByteLevel): scan, for a known regex,
// or literal, a String pattern.
type splitter struct {
	scan     scanner
	literal  string
	behavior behavior
	invert   bool
}

// span is a stretch of a piece and whether the pattern matched it.
type span struct {
	start, end int
	match      bool
}

func (s splitter) split(p piece, emit func(piece)) {
	text := p.text
	if s.scan != nil && s.behavior == isolated {
		// The known patterns match everywhere, so their matches are the pieces (invert changes
		// nothing for Isolated).
		s.scan(text, func(a, b int) { emit(piece{text[a:b], p.first && a == 0}) })
		return
	}
	var spans []span
	if s.scan != nil {
		s.scan(text, func(a, b int) { spans = append(spans, span{a, b, true}) })
	} else {
		spans = literalSpans(text, s.literal)
	}
	if s.invert {
		for i := range spans {
			spans[i].match = !spans[i].match
		}
	}
	for _, sp := range applyBehavior(spans, s.behavior) {
		if sp.end > sp.start {
			emit(piece{text[sp.start:sp.end], p.first && sp.start == 0})
		}
	}
}

// literalSpans covers text with the occurrences of lit (left to right, without overlaps) and the
// stretches between them.
func literalSpans(text, lit string) []span {
	var spans []span
	prev := 0
	for {
		i := strings.Index(text[prev:], lit)
		if i < 0 {
			break
		}
		if i > 0 {
			spans = append(spans, span{prev, prev + i, false})
		}
		spans = append(spans, span{prev + i, prev + i + len(lit), true})
		prev += i + len(lit)
	}
	if prev < len(text) {
		spans = append(spans, span{prev, len(text), false})
	}
	return spans
}

// applyBehavior returns the pieces a Split keeps, as the reference's NormalizedString.split
// computes them from the spans.
func applyBehavior(spans []span, b behavior) []span {
	var out []span
	prevMatch := false
	switch b {
	case isolated:
		return spans
	case removed:
		for _, s := range spans {
			if !s.match {
				out = append(out, s)
			}
		}
	case contiguous:
		for _, s := range spans {
			if s.match == prevMatch && len(out) > 0 {
				out[len(out)-1].end = s.end
			} else {
				out = append(out, s)
			}
			prevMatch = s.match
		}
	case mergedWithPrevious:
		for _, s := range spans {
			if s.match && !prevMatch && len(out) > 0 {
				out[len(out)-1].end = s.end
			} else {
				out = append(out, s)
			}
			prevMatch = s.match
		}
	case mergedWithNext:
		for i := len(spans) - 1; i >= 0; i-- {
			s := spans[i]
			if s.match && !prevMatch && len(out) > 0 {
				out[len(out)-1].start = s.start
			} else {
				out = append(out, s)
			}
			prevMatch = s.match
		}
		for i, j := 0, len(out)-1; i < j; i, j = i+1, j-1 {
			out[i], out[j] = out[j], out[i]
		}
	}
	return out
}

// prefixSpace is ByteLevel's add_prefix_space: a space before each piece that does not start
// with one.
type prefixSpace struct{}

func (prefixSpace) split(p piece, emit func(piece)) {
	if p.text == "" { // nothing to prepend to, and the reference drops empty pieces
		return
	}
	if !strings.HasPrefix(p.text, " ") {
		p.text = " " + p.text
	}
	emit(p)
}

// The Metaspace prepend schemes: the replacement before every piece, before the input's first
// piece only, or never.
const (
	prependAlways = iota
	prependFirst
	prependNever
)

// metaspace is the Metaspace pre-tokenizer: spaces become the replacement ("▁"), which is
// prepended as the scheme says, and with split each "▁" starts a new word.
type metaspace struct {
	replacement string
	scheme      int
	splits      bool
}

func (m metaspace) split(p piece, emit func(piece)) {
	if p.text == "" { // nothing to prepend to, and the reference drops empty pieces
		return
	}
	text := strings.ReplaceAll(p.text, " ", m.replacement)
	if !strings.HasPrefix(text, m.replacement) &&
		(m.scheme == prependAlways || m.scheme == prependFirst && p.first) {
		text = m.replacement + text
	}
	if !m.splits {
		emit(piece{text, p.first})
		return
	}
	for _, sp := range applyBehavior(literalSpans(text, m.replacement), mergedWithNext) {
		emit(piece{text[sp.start:sp.end], p.first && sp.start == 0})
	}
}
