package tokenizer

import (
	"strings"
	"unicode/utf8"
)

// validUTF8 returns s with each maximal invalid subsequence replaced by one U+FFFD, as Rust's
// String::from_utf8_lossy and Python's bytes.decode(errors="replace") do (the Unicode standard's
// "maximal subpart" practice). Go's own conversions differ: a range loop yields one U+FFFD per
// byte of a truncated sequence ("\xf0\x9f\x98" gives three, the reference one), and
// strings.ToValidUTF8 one per run of bad bytes ("\xff\xfe" gives one, the reference two).
func validUTF8(s string) string {
	if utf8.ValidString(s) {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + 8)
	for i := 0; i < len(s); {
		r, w := utf8.DecodeRuneInString(s[i:])
		if r != utf8.RuneError || w > 1 {
			b.WriteString(s[i : i+w])
			i += w
			continue
		}
		b.WriteRune(utf8.RuneError)
		i += maximalSubpart(s[i:])
	}
	return b.String()
}

// maximalSubpart returns the length (>= 1) of the longest prefix of s, which starts with an
// invalid sequence, that is the start of a well-formed UTF-8 sequence (Unicode's table 3-7).
func maximalSubpart(s string) int {
	lo, hi, need := byte(0x80), byte(0xbf), 0
	switch c := s[0]; {
	case c >= 0xc2 && c <= 0xdf:
		need = 1
	case c == 0xe0:
		lo, need = 0xa0, 2
	case c >= 0xe1 && c <= 0xec, c == 0xee, c == 0xef:
		need = 2
	case c == 0xed:
		hi, need = 0x9f, 2
	case c == 0xf0:
		lo, need = 0x90, 3
	case c >= 0xf1 && c <= 0xf3:
		need = 3
	case c == 0xf4:
		hi, need = 0x8f, 3
	default:
		return 1
	}
	n := 1
	for ; n <= need && n < len(s); n++ {
		if s[n] < lo || s[n] > hi {
			break
		}
		lo, hi = 0x80, 0xbf // only the second byte has a narrower range
	}
	return n
}
