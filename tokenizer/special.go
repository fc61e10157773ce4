package tokenizer

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"slices"
)

// template is a TemplateProcessing post-processor's single-sequence template: the sequence and
// special tokens around it.
type template []templatePiece

type templatePiece struct {
	sequence bool  // the encoded text
	ids      []int // a special token's ids
}

// apply returns ids laid out by the template; without addSpecial only the sequence is kept, as
// the reference does.
func (tp template) apply(ids []int, addSpecial bool) []int {
	out := make([]int, 0, len(ids)+4)
	for _, p := range tp {
		switch {
		case p.sequence:
			out = append(out, ids...)
		case addSpecial:
			out = append(out, p.ids...)
		}
	}
	return out
}

// layout is what one template with one sequence does: prefix before the text, suffix after.
type layout struct{ prefix, suffix []int }

// layoutOf returns the layout of templates, or nil when they are not one template with one
// sequence (then Encode applies them one by one). No template is an empty layout.
func layoutOf(templates []template) *layout {
	switch len(templates) {
	case 0:
		return &layout{}
	case 1:
	default:
		return nil
	}
	l, seen := &layout{}, 0
	for _, p := range templates[0] {
		switch {
		case p.sequence:
			seen++
		case seen == 0:
			l.prefix = append(l.prefix, p.ids...)
		default:
			l.suffix = append(l.suffix, p.ids...)
		}
	}
	if seen != 1 {
		return nil
	}
	return l
}

// The files of a Hugging Face folder that name the BOS and EOS tokens.
const (
	configFile           = "tokenizer_config.json"
	generationConfigFile = "generation_config.json"
	maxConfigBytes       = 16 << 20
)

// knownEOS are the end-of-text tokens of the families onegpu knows, which EOSTokens falls back
// on when no config names one.
var knownEOS = []string{"</s>", "<|end_of_text|>", "<|eot_id|>", "<|eom_id|>", "<|endoftext|>", "<|im_end|>"}

// readConfigs reads dir's tokenizer_config.json (bos_token, eos_token) and
// generation_config.json (bos_token_id, eos_token_id), when present.
func (t *Tokenizer) readConfigs(dir string) error {
	var tc struct {
		BOS json.RawMessage `json:"bos_token"`
		EOS json.RawMessage `json:"eos_token"`
	}
	var gc struct {
		BOS json.RawMessage `json:"bos_token_id"`
		EOS json.RawMessage `json:"eos_token_id"`
	}
	for _, c := range []struct {
		name string
		v    any
	}{{configFile, &tc}, {generationConfigFile, &gc}} {
		path := filepath.Join(dir, c.name)
		raw, err := readFile(path, maxConfigBytes)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return err
		}
		if err := json.Unmarshal(raw, c.v); err != nil {
			return fmt.Errorf("%s: %v", path, err)
		}
	}
	var err error
	if t.bos, err = t.configToken(tc.BOS, filepath.Join(dir, configFile)+": bos_token"); err != nil {
		return err
	}
	if t.bos < 0 {
		if ids, err := configIDs(gc.BOS, filepath.Join(dir, generationConfigFile)+": bos_token_id"); err != nil {
			return err
		} else if len(ids) > 0 {
			t.bos = ids[0]
		}
	}
	gen, err := configIDs(gc.EOS, filepath.Join(dir, generationConfigFile)+": eos_token_id")
	if err != nil {
		return err
	}
	eos, err := t.configToken(tc.EOS, filepath.Join(dir, configFile)+": eos_token")
	if err != nil {
		return err
	}
	if eos >= 0 {
		gen = append(gen, eos)
	}
	for _, id := range gen {
		if !slices.Contains(t.eos, id) {
			t.eos = append(t.eos, id)
		}
	}
	return nil
}

// configToken returns the id of a tokenizer_config.json token: a string, or an object with its
// "content"; -1 when absent or null.
func (t *Tokenizer) configToken(raw json.RawMessage, path string) (int, error) {
	if isNull(raw) {
		return -1, nil
	}
	var name string
	if err := json.Unmarshal(raw, &name); err != nil {
		var obj struct {
			Content string `json:"content"`
		}
		if err := json.Unmarshal(raw, &obj); err != nil {
			return -1, fmt.Errorf("%s: %s is neither a string nor a token object", path, raw)
		}
		name = obj.Content
	}
	id, ok := t.ID(name)
	if !ok {
		return -1, fmt.Errorf("%s: %q is not a token of tokenizer.json", path, name)
	}
	return id, nil
}

// configIDs returns a generation_config.json id or list of ids (none when absent or null).
func configIDs(raw json.RawMessage, path string) ([]int, error) {
	if isNull(raw) {
		return nil, nil
	}
	var one int
	if err := json.Unmarshal(raw, &one); err == nil {
		return []int{one}, nil
	}
	var list []int
	if err := json.Unmarshal(raw, &list); err != nil {
		return nil, fmt.Errorf("%s: %s is neither an id nor a list of ids", path, raw)
	}
	return list, nil
}

// BOS returns the beginning-of-sequence token: tokenizer_config.json's bos_token, else
// generation_config.json's bos_token_id, else the special token the post-processor's template
// puts before the text. ok is false when none says.
func (t *Tokenizer) BOS() (id int, ok bool) {
	if t.bos >= 0 {
		return t.bos, true
	}
	for _, tp := range t.templates {
		if len(tp) > 1 && !tp[0].sequence && len(tp[0].ids) == 1 {
			return tp[0].ids[0], true
		}
	}
	return -1, false
}

// EOSTokens returns the tokens that end a generation: generation_config.json's eos_token_id (one
// or a list: Llama 3.1 Instruct stops at <|end_of_text|>, <|eom_id|> and <|eot_id|>) and
// tokenizer_config.json's eos_token. Without either, the special tokens the post-processor's
// template puts after the text, or else the special tokens among the known end tokens (</s>,
// <|end_of_text|>, <|eot_id|>, <|eom_id|>, <|endoftext|>, <|im_end|>).
func (t *Tokenizer) EOSTokens() []int {
	if len(t.eos) > 0 {
		return slices.Clone(t.eos)
	}
	var out []int
	for _, tp := range t.templates {
		seen := false
		for _, p := range tp {
			if p.sequence {
				seen = true
			} else if seen {
				out = append(out, p.ids...)
			}
		}
	}
	if len(out) > 0 {
		return out
	}
	for _, name := range knownEOS {
		if a, ok := t.addedByText[name]; ok && a.special {
			out = append(out, a.id)
		}
	}
	return out
}
