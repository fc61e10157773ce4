package tokenizer

import (
	"sync"
	"unicode"
	"unicode/utf8"
)

// The character classes the split patterns distinguish: \p{L}, \p{N}, \s and the rest. The four
// are disjoint.
const (
	other byte = iota
	letter
	number
	space
)

// bmpClass holds the class of every rune below 0x10000 (64 KiB, filled on first use); runes above
// look the tables up.
var (
	bmpClass     [0x10000]byte
	bmpClassOnce sync.Once
)

func fillClasses() {
	for r := rune(0); r < 0x10000; r++ {
		bmpClass[r] = lookupClass(r)
	}
}

func lookupClass(r rune) byte {
	switch {
	case unicode.Is(classLetter, r):
		return letter
	case unicode.Is(classNumber, r):
		return number
	case unicode.Is(classSpace, r):
		return space
	}
	return other
}

func classOf(r rune) byte {
	if r < 0x10000 {
		return bmpClass[r]
	}
	return lookupClass(r)
}

// A scanner splits s into the consecutive matches of one regex (every position of s starts a
// match of the known patterns, so the matches cover s), calling emit with each match's bounds.
type scanner func(s string, emit func(start, end int))

// The split patterns onegpu knows, as tokenizer.json spells them, and their scanners.
const (
	patternLlama3 = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
	patternQwen2  = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
	patternGPT2   = `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`
)

var knownPatterns = map[string]scanner{
	patternLlama3: func(s string, emit func(int, int)) { scanLlama3(s, 3, emit) },
	patternQwen2:  func(s string, emit func(int, int)) { scanLlama3(s, 1, emit) },
	patternGPT2:   scanGPT2,
}

func decode(s string, i int) (rune, int) {
	if c := s[i]; c < utf8.RuneSelf {
		return rune(c), 1
	}
	return utf8.DecodeRuneInString(s[i:])
}

// run returns the end of the run of runes of class c that starts at i (i itself when none).
func run(s string, i int, c byte) int {
	for i < len(s) {
		r, w := decode(s, i)
		if classOf(r) != c {
			break
		}
		i += w
	}
	return i
}

// contraction returns the length of the contraction ('s 't 're 've 'm 'll 'd) that starts at
// s[i], an apostrophe, or 0. Case-insensitively (Llama 3, Qwen2) Oniguruma folds 'ſ' (U+017F) to 's'
// too; no other character folds to these letters.
func contraction(s string, i int, fold bool) int {
	lower := func(j int) (byte, int) {
		if j >= len(s) {
			return 0, 0
		}
		c := s[j]
		if fold {
			if c >= 'A' && c <= 'Z' {
				return c + 'a' - 'A', 1
			}
			if c == 0xc5 && j+1 < len(s) && s[j+1] == 0xbf { // ſ
				return 's', 2
			}
		}
		return c, 1
	}
	c1, w1 := lower(i + 1)
	switch c1 {
	case 's', 't', 'm', 'd':
		return 1 + w1
	case 'r', 'v', 'l':
		c2, w2 := lower(i + 1 + w1)
		if c1 == 'l' && c2 == 'l' || c1 != 'l' && c2 == 'e' {
			return 1 + w1 + w2
		}
	}
	return 0
}

// spaceTail handles a run of whitespace at i, the patterns' last alternatives: \s*[\r\n]+ (with
// crlf: through the run's last CR or LF), then \s+(?!\S) (the run, less its last character when
// a non-space follows and the run has more than one), then \s+.
func spaceTail(s string, i int, crlf bool) int {
	end, last, lastW := i, -1, 0
	for end < len(s) {
		r, w := decode(s, end)
		if classOf(r) != space {
			break
		}
		if r == '\r' || r == '\n' {
			last = end
		}
		end += w
		lastW = w
	}
	switch {
	case crlf && last >= 0:
		return last + 1
	case end == len(s) || end-lastW == i:
		return end
	}
	return end - lastW
}

// scanLlama3 matches Llama 3's pattern (maxDigits 3) or Qwen2's (maxDigits 1):
//
//	(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
//
// one alternative after the other, in the regex's order, with its backtracking made explicit.
func scanLlama3(s string, maxDigits int, emit func(start, end int)) {
	bmpClassOnce.Do(fillClasses)
	for i := 0; i < len(s); {
		end := matchLlama3(s, i, maxDigits)
		emit(i, end)
		i = end
	}
}

func matchLlama3(s string, i, maxDigits int) int {
	r0, w0 := decode(s, i)
	if r0 == '\'' {
		if n := contraction(s, i, true); n > 0 {
			return i + n
		}
	}
	c0 := classOf(r0)
	switch {
	case c0 == letter:
		return run(s, i+w0, letter)
	case c0 != number && r0 != '\r' && r0 != '\n' && i+w0 < len(s):
		// [^\r\n\p{L}\p{N}]?\p{L}+: one leading character of another class.
		if r1, w1 := decode(s, i+w0); classOf(r1) == letter {
			return run(s, i+w0+w1, letter)
		}
	}
	if c0 == number {
		j := i + w0
		for k := 1; k < maxDigits && j < len(s); k++ {
			r, w := decode(s, j)
			if classOf(r) != number {
				break
			}
			j += w
		}
		return j
	}
	// ' ?[^\s\p{L}\p{N}]+[\r\n]*'
	j := i
	if r0 == ' ' {
		j++
	}
	if j < len(s) {
		if r, w := decode(s, j); classOf(r) == other {
			j = run(s, j+w, other)
			for j < len(s) && (s[j] == '\r' || s[j] == '\n') {
				j++
			}
			return j
		}
	}
	return spaceTail(s, i, true)
}

// scanGPT2 matches GPT-2's pattern, which the ByteLevel pre-tokenizer uses with use_regex:
//
//	's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
func scanGPT2(s string, emit func(start, end int)) {
	bmpClassOnce.Do(fillClasses)
	for i := 0; i < len(s); {
		end := matchGPT2(s, i)
		emit(i, end)
		i = end
	}
}

func matchGPT2(s string, i int) int {
	r0, w0 := decode(s, i)
	if r0 == '\'' {
		if n := contraction(s, i, false); n > 0 {
			return i + n
		}
	}
	j, c := i, classOf(r0)
	if r0 == ' ' && i+1 < len(s) {
		r1, w1 := decode(s, i+1)
		if c1 := classOf(r1); c1 != space {
			j, c, w0 = i+1, c1, w1
		}
	}
	if c != space {
		return run(s, j+w0, c)
	}
	return spaceTail(s, i, false)
}
