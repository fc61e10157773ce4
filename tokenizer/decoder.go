package tokenizer

import (
	"strings"
	"unicode/utf8"
)

// A decoder turns tokens back into text, step by step: each decoder of a sequence gets the
// previous one's output; Decode joins the last output.
type decoder interface {
	decode(tokens []string) []string
}

type decoderSequence []decoder

func (d decoderSequence) decode(tokens []string) []string {
	for _, x := range d {
		tokens = x.decode(tokens)
	}
	return tokens
}

// byteLevelDecoder maps every token's byte-level characters back to bytes (a token with another
// character, an added token like "<|eot_id|>" with a space, gives its own UTF-8 bytes) and
// decodes all of them at once, invalid sequences as U+FFFD (from_utf8_lossy).
type byteLevelDecoder struct{}

func (byteLevelDecoder) decode(tokens []string) []string {
	var b []byte
	for _, t := range tokens {
		if raw, ok := byteLevelBytes(t); ok {
			b = append(b, raw...)
		} else {
			b = append(b, t...)
		}
	}
	return []string{validUTF8(string(b))}
}

// metaspaceDecoder turns the replacement back into spaces, and drops it from the first token
// unless the prepend scheme is never (all of them there, as the reference does).
type metaspaceDecoder metaspace

func (m metaspaceDecoder) decode(tokens []string) []string {
	out := make([]string, len(tokens))
	for i, t := range tokens {
		with := " "
		if i == 0 && m.scheme != prependNever {
			with = ""
		}
		out[i] = strings.ReplaceAll(t, m.replacement, with)
	}
	return out
}

// replaceDecoder is Replace applied to each token.
type replaceDecoder replace

func (r replaceDecoder) decode(tokens []string) []string {
	out := make([]string, len(tokens))
	for i, t := range tokens {
		out[i] = strings.ReplaceAll(t, r.pattern, r.content)
	}
	return out
}

// byteFallbackDecoder turns each run of <0xNN> tokens into the text their bytes spell, or one
// U+FFFD per token when the bytes are not valid UTF-8.
type byteFallbackDecoder struct{}

func (byteFallbackDecoder) decode(tokens []string) []string {
	out := make([]string, 0, len(tokens))
	var run []byte
	flush := func() {
		if len(run) == 0 {
			return
		}
		if s := string(run); utf8.ValidString(s) {
			out = append(out, s)
		} else {
			for range run {
				out = append(out, "\uFFFD")
			}
		}
		run = run[:0]
	}
	for _, t := range tokens {
		if b, ok := byteToken(t); ok {
			run = append(run, b)
			continue
		}
		flush()
		out = append(out, t)
	}
	flush()
	return out
}

// byteToken parses "<0xNN>" as the reference does: six bytes, and NN read by Rust's
// u8::from_str_radix(NN, 16), which also takes "+N".
func byteToken(t string) (byte, bool) {
	if len(t) != 6 || !strings.HasPrefix(t, "<0x") || t[5] != '>' {
		return 0, false
	}
	hex := t[3:5]
	if hex[0] == '+' {
		v, ok := hexDigit(hex[1])
		return v, ok
	}
	hi, ok1 := hexDigit(hex[0])
	lo, ok2 := hexDigit(hex[1])
	return hi<<4 | lo, ok1 && ok2
}

func hexDigit(c byte) (byte, bool) {
	switch {
	case c >= '0' && c <= '9':
		return c - '0', true
	case c >= 'a' && c <= 'f':
		return c - 'a' + 10, true
	case c >= 'A' && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}

// fuseDecoder joins all tokens into one.
type fuseDecoder struct{}

func (fuseDecoder) decode(tokens []string) []string { return []string{strings.Join(tokens, "")} }

// stripDecoder removes up to start leading and stop trailing content characters from each token.
type stripDecoder struct {
	content     rune
	start, stop int
}

func (s stripDecoder) decode(tokens []string) []string {
	out := make([]string, len(tokens))
	for i, t := range tokens {
		chars := []rune(t)
		from := 0
		for from < len(chars) && from < s.start && chars[from] == s.content {
			from++
		}
		to := len(chars)
		for k := 0; k < s.stop && to > from && chars[to-1] == s.content; k++ {
			to--
		}
		out[i] = string(chars[from:to])
	}
	return out
}
