package infer

import (
	"io"
	"strings"
)

// Decoder turns token ids into text (a *tokenizer.Tokenizer is one).
type Decoder interface {
	Decode(ids []int, skipSpecial bool) string
}

// TextStream writes the text of generated tokens as they come (Add), special tokens left out: the
// text of the prompt and the tokens so far, decoded together, after the prompt's own text, so that
// a token's leading space or a character split across byte tokens comes out as the whole text
// has it. A character still incomplete (its bytes not all generated, decoded as U+FFFD) waits for
// the next token; Flush writes what is left.
type TextStream struct {
	w          io.Writer
	tok        Decoder
	ids        []int // the prompt's, then the generated tokens
	promptLen  int
	promptText string
	written    string // the generated text written so far
}

// NewTextStream returns a stream writing to w the text tok decodes of the tokens generated after
// prompt.
func NewTextStream(w io.Writer, tok Decoder, prompt []int32) *TextStream {
	s := &TextStream{w: w, tok: tok, promptLen: len(prompt)}
	for _, t := range prompt {
		s.ids = append(s.ids, int(t))
	}
	s.promptText = tok.Decode(s.ids, true)
	return s
}

// Text is the text of the tokens generated so far.
func (s *TextStream) Text() string {
	full := s.tok.Decode(s.ids, true)
	if strings.HasPrefix(full, s.promptText) {
		return full[len(s.promptText):]
	}
	// The prompt's text changed with what followed it (a decoder's cleanup): the generated
	// tokens' text alone.
	return s.tok.Decode(s.ids[s.promptLen:], true)
}

// Add appends a generated token and writes the text it completes.
func (s *TextStream) Add(token int32) error {
	s.ids = append(s.ids, int(token))
	text := s.Text()
	// Hold back a trailing replacement character: the next byte tokens may complete it.
	for strings.HasSuffix(text, "\uFFFD") {
		text = strings.TrimSuffix(text, "\uFFFD")
	}
	return s.write(text)
}

// Flush writes the text not written yet, an incomplete character included.
func (s *TextStream) Flush() error { return s.write(s.Text()) }

// write writes text's part after what was written, when text continues it.
func (s *TextStream) write(text string) error {
	if len(text) <= len(s.written) || !strings.HasPrefix(text, s.written) {
		return nil
	}
	if _, err := io.WriteString(s.w, text[len(s.written):]); err != nil {
		return err
	}
	s.written = text
	return nil
}

// IDs converts token ids (a tokenizer's) to the int32 ids Generate takes.
func IDs(ids []int) []int32 {
	out := make([]int32, len(ids))
	for i, id := range ids {
		out[i] = int32(id)
	}
	return out
}
