package tokenizer

import "unicode/utf8"

// byteChar maps each byte to the printable character GPT-2's byte-level BPE stands it for
// (bytes_to_unicode: printable Latin-1 bytes map to themselves, the others to U+0100 onward), and
// charByte maps those characters back.
var byteChar [256]rune
var charByte = map[rune]byte{}

func init() {
	n := 0
	for b := 0; b < 256; b++ {
		if b >= '!' && b <= '~' || b >= 0xa1 && b <= 0xac || b >= 0xae && b <= 0xff {
			byteChar[b] = rune(b)
		} else {
			byteChar[b] = rune(256 + n)
			n++
		}
		charByte[byteChar[b]] = byte(b)
	}
}

// byteLevelString returns s with each byte replaced by its byte-level character.
func byteLevelString(s string) string {
	out := make([]byte, 0, 2*len(s))
	for i := 0; i < len(s); i++ {
		out = utf8.AppendRune(out, byteChar[s[i]])
	}
	return string(out)
}

// byteLevelBytes returns the bytes that token's byte-level characters stand for, and false when
// one of its characters is not a byte-level character.
func byteLevelBytes(token string) ([]byte, bool) {
	out := make([]byte, 0, len(token))
	for _, r := range token {
		b, ok := charByte[r]
		if !ok {
			return nil, false
		}
		out = append(out, b)
	}
	return out, true
}
