package infer_test

import (
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/onegpu/onegpu/infer"
	"github.com/onegpu/onegpu/tokenizer"
)

// writes records each write.
type writes []string

func (w *writes) Write(p []byte) (int, error) { *w = append(*w, string(p)); return len(p), nil }

// TestTextStreamWholeCharacters: streaming the tokens of a text whose characters span several
// byte tokens (an emoji, accents) writes, piece by piece, exactly the text, never a half character
// (U+FFFD), and a leading space comes out as the text after the prompt has it, for byte-level BPE
// (Llama 3) and SentencePiece (Llama 2, whose decoder drops the first token's leading space).
func TestTextStreamWholeCharacters(t *testing.T) {
	_, here, _, _ := runtime.Caller(0)
	for _, family := range []string{"llama3", "llama2"} {
		tok, err := tokenizer.Load(filepath.Join(filepath.Dir(here), "..", "tokenizer", "testdata", family))
		if err != nil {
			t.Fatal(err)
		}
		prompt := infer.IDs(tok.Encode("Bonjour", true))
		const text = " la crème 🙂 über naïve 日本語" // not "café": an added token of the fixture that byte-level decoding garbles
		all := infer.IDs(tok.Encode("Bonjour"+text, true))
		generated := all[len(prompt):]
		if !strings.HasPrefix(tok.Decode(ints(all[:len(prompt)]), true), "Bonjour") {
			t.Fatalf("%s: the prompt's tokens are not a prefix of the whole text's", family)
		}
		var w writes
		s := infer.NewTextStream(&w, tok, prompt)
		for _, id := range generated {
			if err := s.Add(id); err != nil {
				t.Fatal(err)
			}
		}
		if err := s.Flush(); err != nil {
			t.Fatal(err)
		}
		want := strings.TrimPrefix(tok.Decode(ints(all), true), tok.Decode(ints(prompt), true))
		if got := strings.Join(w, ""); got != want || s.Text() != want {
			t.Errorf("%s: streamed %q (text %q), want %q", family, got, s.Text(), want)
		}
		for _, piece := range w {
			if strings.ContainsRune(piece, '\uFFFD') {
				t.Errorf("%s: wrote a half character: %q of %q", family, piece, w)
			}
		}
		t.Logf("%s: %d tokens written in %d pieces: %q", family, len(generated), len(w), []string(w))
	}
}

func ints(ids []int32) []int {
	out := make([]int, len(ids))
	for i, id := range ids {
		out[i] = int(id)
	}
	return out
}
