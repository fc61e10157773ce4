package tokenizer

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/onegpu/onegpu/internal/regularfile"
)

// File is the name of the tokenizer in a Hugging Face folder.
const File = "tokenizer.json"

// maxFileBytes bounds what Load reads: the largest published tokenizer.json files are a few
// tens of MB (Llama 3's is 9 MB).
const maxFileBytes = 256 << 20

// Tokenizer encodes text into token ids and decodes ids into text as Hugging Face's tokenizers
// library does with the same tokenizer.json. It is safe for concurrent use.
type Tokenizer struct {
	model      *bpe
	normalizer normalizer // nil: none
	pre        []preTokenizer
	templates  []template
	layout     *layout // the templates' effect when it is special tokens around the text
	decoder    decoder // nil: tokens joined with spaces, as the reference does

	added       []*addedToken // by id
	addedByID   map[int]*addedToken
	addedByText map[string]*addedToken
	special     map[string]bool // special tokens' contents, which Decode skips on request
	raw, normed *matcher        // added tokens matched before and after normalization
	vocabSize   int
	bos         int   // -1: not known
	eos         []int // from the folder's configs
}

// Load reads a tokenizer: path is a Hugging Face folder holding tokenizer.json, or the
// tokenizer.json file itself. tokenizer_config.json and generation_config.json next to it, when
// present, name the BOS and EOS tokens (BOS, EOSTokens). An error names the file and, for a
// component onegpu does not read, its JSON path and type.
func Load(path string) (*Tokenizer, error) {
	info, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	dir, name := path, filepath.Join(path, File)
	if !info.IsDir() {
		dir, name = filepath.Dir(path), path
	}
	data, err := readFile(name, maxFileBytes)
	if errors.Is(err, fs.ErrNotExist) && info.IsDir() {
		return nil, fmt.Errorf("%s has no %s (onegpu reads the tokenizers library's %s; a SentencePiece tokenizer.model alone is not read)", path, File, File)
	}
	if err != nil {
		return nil, err
	}
	t, err := Parse(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	if err := t.readConfigs(dir); err != nil {
		return nil, err
	}
	return t, nil
}

// readFile reads a file of a Hugging Face folder, of at most limit bytes: a regular file or a
// link to one (the Hugging Face cache's snapshot folders link to its blobs); a link to a device or
// a named pipe is refused before it is read (regularfile.ReadLinked).
func readFile(path string, limit int64) ([]byte, error) {
	return regularfile.ReadLinked(path, limit)
}

// Parse reads the content of a tokenizer.json.
func Parse(data []byte) (*Tokenizer, error) {
	var f file
	if err := json.Unmarshal(data, &f); err != nil {
		return nil, fmt.Errorf("not a tokenizer.json: %v", err)
	}
	switch {
	case f.Version != "" && f.Version != "1.0":
		return nil, fmt.Errorf("version: %q is not 1.0 (the tokenizers library refuses it too)", f.Version)
	case !isNull(f.Truncation):
		return nil, errors.New("truncation: set; onegpu's tokenizer does not truncate (remove it, and cut the ids instead)")
	case !isNull(f.Padding):
		return nil, errors.New("padding: set; onegpu's tokenizer does not pad (remove it, and pad the ids instead)")
	}
	t := &Tokenizer{bos: -1, addedByID: map[int]*addedToken{}, addedByText: map[string]*addedToken{},
		special: map[string]bool{}}
	var err error
	if !isNull(f.Normalizer) {
		if t.normalizer, err = parseNormalizer(f.Normalizer, "normalizer"); err != nil {
			return nil, err
		}
	}
	byteLevel := false
	if !isNull(f.PreTokenizer) {
		if t.pre, byteLevel, err = parsePreTokenizer(f.PreTokenizer, "pre_tokenizer"); err != nil {
			return nil, err
		}
	}
	if t.model, err = parseModel(f.Model, "model", byteLevel); err != nil {
		return nil, err
	}
	if t.added, err = parseAdded(f.AddedTokens, t.model, t.normalizer); err != nil {
		return nil, err
	}
	t.vocabSize = len(t.model.tokens)
	var raw, normed []*addedToken
	for _, a := range t.added {
		t.addedByID[a.id] = a
		t.addedByText[a.content] = a
		if a.special {
			t.special[a.content] = true
		}
		if a.normalized {
			normed = append(normed, a)
		} else {
			raw = append(raw, a)
		}
		t.vocabSize = max(t.vocabSize, a.id+1)
	}
	t.raw = newMatcher(raw, func(a *addedToken) string { return a.content })
	t.normed = newMatcher(normed, (*addedToken).decoded)
	if !isNull(f.PostProcessor) {
		if t.templates, err = parsePostProcessor(f.PostProcessor, "post_processor"); err != nil {
			return nil, err
		}
	}
	t.layout = layoutOf(t.templates)
	if !isNull(f.Decoder) {
		if t.decoder, err = parseDecoder(f.Decoder, "decoder"); err != nil {
			return nil, err
		}
	}
	return t, nil
}

// Encode returns the token ids of text. With addSpecial the post-processor's template adds its
// special tokens (Llama's BOS), as the reference's add_special_tokens=True does; added tokens
// written in the text (a chat template's "<|eot_id|>") are encoded as themselves either way.
// Text that is not valid UTF-8 is encoded as its lossy conversion (see the package doc).
func (t *Tokenizer) Encode(text string, addSpecial bool) []int {
	text = validUTF8(text)
	e := &encoder{t: t, ids: make([]int, 0, len(text)/2+8)}
	if t.layout != nil && addSpecial {
		e.ids = append(e.ids, t.layout.prefix...)
	}
	t.raw.split(text, true, e.rawPiece)
	switch {
	case t.layout != nil:
		if addSpecial {
			e.ids = append(e.ids, t.layout.suffix...)
		}
	default:
		for _, tp := range t.templates {
			e.ids = tp.apply(e.ids, addSpecial)
		}
	}
	return e.ids
}

// encoder collects the ids of one Encode as the text goes through the pipeline's steps.
type encoder struct {
	t   *Tokenizer
	ids []int
}

// rawPiece takes a piece of the input: an added token matched before normalization, or text to
// normalize and look for normalized added tokens in.
func (e *encoder) rawPiece(s string, tok *addedToken, first bool) {
	if tok != nil {
		e.ids = append(e.ids, tok.id)
		return
	}
	if e.t.normalizer != nil {
		s = e.t.normalizer.normalize(s)
	}
	e.t.normed.split(s, first, e.normalizedPiece)
}

func (e *encoder) normalizedPiece(s string, tok *addedToken, first bool) {
	if tok != nil {
		e.ids = append(e.ids, tok.id)
		return
	}
	e.preTokenize(piece{s, first}, 0)
}

// preTokenize runs the pre-tokenizers from the k-th on p, and the model on the words they make.
func (e *encoder) preTokenize(p piece, k int) {
	if k == len(e.t.pre) {
		e.ids = e.t.model.appendWord(e.ids, p.text)
		return
	}
	e.t.pre[k].split(p, func(q piece) { e.preTokenize(q, k+1) })
}

// Decode returns the text of ids, through the tokenizer's decoder. With skipSpecial, special
// tokens (BOS, EOS, "<|eot_id|>") are left out. Ids outside the vocabulary are skipped, as the
// reference skips them.
func (t *Tokenizer) Decode(ids []int, skipSpecial bool) string {
	tokens := make([]string, 0, len(ids))
	for _, id := range ids {
		tok, ok := t.model.token(id)
		if a, isAdded := t.addedByID[id]; isAdded {
			tok, ok = a.decoded(), true
		}
		if !ok {
			continue
		}
		if skipSpecial && t.special[tok] {
			continue
		}
		tokens = append(tokens, tok)
	}
	if t.decoder == nil {
		return strings.Join(tokens, " ")
	}
	return strings.Join(t.decoder.decode(tokens), "")
}

// VocabSize is one more than the largest token id: the rows an embedding for these ids needs.
func (t *Tokenizer) VocabSize() int { return t.vocabSize }

// ID returns the id of a token, an added one ("<|eot_id|>") or one of the model's vocabulary
// (in its own spelling: "Ġthe" for byte-level BPE, "▁the" for SentencePiece).
func (t *Tokenizer) ID(token string) (int, bool) {
	if a, ok := t.addedByText[token]; ok {
		return a.id, true
	}
	id, ok := t.model.vocab[token]
	return int(id), ok
}

// Token returns the token of an id, as ID spells it.
func (t *Tokenizer) Token(id int) (string, bool) {
	if a, ok := t.addedByID[id]; ok {
		return a.content, true
	}
	return t.model.token(id)
}

// IsSpecial says whether id is a special token: one Decode leaves out with skipSpecial.
func (t *Tokenizer) IsSpecial(id int) bool {
	a, ok := t.addedByID[id]
	return ok && a.special
}
