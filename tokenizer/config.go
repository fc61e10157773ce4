package tokenizer

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"unicode/utf8"
)

// file is tokenizer.json's top level, its components left raw for parse* below.
type file struct {
	Version       string          `json:"version"`
	Truncation    json.RawMessage `json:"truncation"`
	Padding       json.RawMessage `json:"padding"`
	AddedTokens   []addedJSON     `json:"added_tokens"`
	Normalizer    json.RawMessage `json:"normalizer"`
	PreTokenizer  json.RawMessage `json:"pre_tokenizer"`
	PostProcessor json.RawMessage `json:"post_processor"`
	Decoder       json.RawMessage `json:"decoder"`
	Model         json.RawMessage `json:"model"`
}

type addedJSON struct {
	ID         int    `json:"id"`
	Content    string `json:"content"`
	SingleWord bool   `json:"single_word"`
	LStrip     bool   `json:"lstrip"`
	RStrip     bool   `json:"rstrip"`
	Normalized *bool  `json:"normalized"`
	Special    bool   `json:"special"`
}

// component is what every component of tokenizer.json has: its type, and the rest.
type component struct {
	Type string `json:"type"`
}

// isNull says whether a component is absent or null (none configured).
func isNull(raw json.RawMessage) bool {
	raw = bytes.TrimSpace(raw)
	return len(raw) == 0 || bytes.Equal(raw, []byte("null"))
}

// decodeAt unmarshals raw into v, naming path in the error.
func decodeAt(raw json.RawMessage, path string, v any) error {
	if err := json.Unmarshal(raw, v); err != nil {
		return fmt.Errorf("%s: %v", path, err)
	}
	return nil
}

func typeOf(raw json.RawMessage, path string) (string, error) {
	var c component
	if err := decodeAt(raw, path, &c); err != nil {
		return "", err
	}
	if c.Type == "" {
		return "", fmt.Errorf("%s: no \"type\"", path)
	}
	return c.Type, nil
}

// sequence parses the elements of a Sequence component's list (its key: "normalizers",
// "decoders", ...), each at its own path.
func sequence[T any](raw json.RawMessage, path, key string, parse func(json.RawMessage, string) (T, error)) ([]T, error) {
	var v map[string]json.RawMessage
	if err := decodeAt(raw, path, &v); err != nil {
		return nil, err
	}
	var items []json.RawMessage
	if err := decodeAt(v[key], path+"."+key, &items); err != nil {
		return nil, err
	}
	out := make([]T, 0, len(items))
	for i, r := range items {
		x, err := parse(r, fmt.Sprintf("%s.%s[%d]", path, key, i))
		if err != nil {
			return nil, err
		}
		out = append(out, x)
	}
	return out, nil
}

func unsupported(path, kind, typ, supported string) error {
	return fmt.Errorf("%s: %s type %q is not supported (onegpu reads %s)", path, kind, typ, supported)
}

// pattern is a Split or Replace pattern: {"String": "..."} or {"Regex": "..."}.
type pattern struct {
	String *string `json:"String"`
	Regex  *string `json:"Regex"`
}

// literal returns a pattern's string, and an error for a regex (or an empty string, which the
// reference matches between every two characters).
func (p pattern) literal(path string) (string, error) {
	switch {
	case p.Regex != nil:
		return "", fmt.Errorf("%s: the regex pattern %q is not supported here (onegpu reads a String pattern)", path, *p.Regex)
	case p.String == nil:
		return "", fmt.Errorf("%s: neither \"String\" nor \"Regex\"", path)
	case *p.String == "":
		return "", fmt.Errorf("%s: an empty String pattern is not supported", path)
	}
	return *p.String, nil
}

func parseNormalizer(raw json.RawMessage, path string) (normalizer, error) {
	typ, err := typeOf(raw, path)
	if err != nil {
		return nil, err
	}
	switch typ {
	case "Sequence":
		seq, err := sequence(raw, path, "normalizers", parseNormalizer)
		return normalizerSequence(seq), err
	case "Prepend":
		var v struct {
			Prepend string `json:"prepend"`
		}
		if err := decodeAt(raw, path, &v); err != nil {
			return nil, err
		}
		return prepend(v.Prepend), nil
	case "Replace":
		r, err := parseReplace(raw, path)
		return r, err
	case "NFC":
		return nfc{}, nil
	}
	return nil, unsupported(path, "normalizer", typ, "Sequence, Prepend, Replace, NFC")
}

func parseReplace(raw json.RawMessage, path string) (replace, error) {
	var v struct {
		Pattern pattern `json:"pattern"`
		Content string  `json:"content"`
	}
	if err := decodeAt(raw, path, &v); err != nil {
		return replace{}, err
	}
	lit, err := v.Pattern.literal(path + ".pattern")
	return replace{pattern: lit, content: v.Content}, err
}

// parsePreTokenizer returns the chain of pre-tokenizers raw describes (a Sequence flattened), and
// whether it ends with ByteLevel, which makes the model's input bytes.
func parsePreTokenizer(raw json.RawMessage, path string) (chain []preTokenizer, byteLevel bool, err error) {
	typ, err := typeOf(raw, path)
	if err != nil {
		return nil, false, err
	}
	switch typ {
	case "Sequence":
		type parsed struct {
			chain     []preTokenizer
			byteLevel bool
		}
		seq, err := sequence(raw, path, "pretokenizers", func(r json.RawMessage, p string) (parsed, error) {
			c, bl, err := parsePreTokenizer(r, p)
			return parsed{c, bl}, err
		})
		if err != nil {
			return nil, false, err
		}
		for i, p := range seq {
			if byteLevel {
				return nil, false, fmt.Errorf("%s.pretokenizers[%d]: a pre-tokenizer after ByteLevel is not supported", path, i)
			}
			chain, byteLevel = append(chain, p.chain...), p.byteLevel
		}
		return chain, byteLevel, nil
	case "Split":
		var v struct {
			Pattern  pattern `json:"pattern"`
			Behavior string  `json:"behavior"`
			Invert   bool    `json:"invert"`
		}
		if err := decodeAt(raw, path, &v); err != nil {
			return nil, false, err
		}
		s := splitter{invert: v.Invert}
		var ok bool
		if s.behavior, ok = behaviors[v.Behavior]; !ok {
			return nil, false, fmt.Errorf("%s.behavior: %q is not one of Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous", path, v.Behavior)
		}
		switch {
		case v.Pattern.Regex != nil:
			if s.scan, ok = knownPatterns[*v.Pattern.Regex]; !ok {
				return nil, false, fmt.Errorf("%s.pattern: the regex %q is not supported (onegpu knows Llama 3's, Qwen2's and GPT-2's patterns)", path, *v.Pattern.Regex)
			}
		default:
			if s.literal, err = v.Pattern.literal(path + ".pattern"); err != nil {
				return nil, false, err
			}
		}
		return []preTokenizer{s}, false, nil
	case "ByteLevel":
		var v struct {
			AddPrefixSpace bool  `json:"add_prefix_space"`
			UseRegex       *bool `json:"use_regex"`
		}
		if err := decodeAt(raw, path, &v); err != nil {
			return nil, false, err
		}
		var chain []preTokenizer
		if v.AddPrefixSpace {
			chain = append(chain, prefixSpace{})
		}
		if v.UseRegex == nil || *v.UseRegex { // the reference's default is true
			chain = append(chain, splitter{scan: scanGPT2, behavior: isolated})
		}
		return chain, true, nil
	case "Metaspace":
		m, err := parseMetaspace(raw, path)
		if err != nil {
			return nil, false, err
		}
		return []preTokenizer{m}, false, nil
	}
	return nil, false, unsupported(path, "pre-tokenizer", typ, "Sequence, Split, ByteLevel, Metaspace")
}

func parseMetaspace(raw json.RawMessage, path string) (metaspace, error) {
	var v struct {
		Replacement    string `json:"replacement"`
		AddPrefixSpace *bool  `json:"add_prefix_space"`
		PrependScheme  string `json:"prepend_scheme"`
		Split          *bool  `json:"split"`
	}
	if err := decodeAt(raw, path, &v); err != nil {
		return metaspace{}, err
	}
	if utf8.RuneCountInString(v.Replacement) != 1 {
		return metaspace{}, fmt.Errorf("%s.replacement: %q is not one character", path, v.Replacement)
	}
	m := metaspace{replacement: v.Replacement, splits: v.Split == nil || *v.Split}
	switch v.PrependScheme {
	case "", "always": // the reference's default
		m.scheme = prependAlways
	case "first":
		m.scheme = prependFirst
	case "never":
		m.scheme = prependNever
	default:
		return metaspace{}, fmt.Errorf("%s.prepend_scheme: %q is not one of always, first, never", path, v.PrependScheme)
	}
	if v.AddPrefixSpace != nil && !*v.AddPrefixSpace {
		if m.scheme != prependNever {
			return metaspace{}, fmt.Errorf("%s: add_prefix_space false does not match prepend_scheme %q (the reference refuses it too)", path, v.PrependScheme)
		}
	}
	return m, nil
}

func parseDecoder(raw json.RawMessage, path string) (decoder, error) {
	typ, err := typeOf(raw, path)
	if err != nil {
		return nil, err
	}
	switch typ {
	case "Sequence":
		seq, err := sequence(raw, path, "decoders", parseDecoder)
		return decoderSequence(seq), err
	case "ByteLevel":
		return byteLevelDecoder{}, nil
	case "Metaspace":
		m, err := parseMetaspace(raw, path)
		return metaspaceDecoder(m), err
	case "Replace":
		r, err := parseReplace(raw, path)
		return replaceDecoder(r), err
	case "ByteFallback":
		return byteFallbackDecoder{}, nil
	case "Fuse":
		return fuseDecoder{}, nil
	case "Strip":
		var v struct {
			Content string `json:"content"`
			Start   int    `json:"start"`
			Stop    int    `json:"stop"`
		}
		if err := decodeAt(raw, path, &v); err != nil {
			return nil, err
		}
		c, w := utf8.DecodeRuneInString(v.Content)
		if w == 0 || w != len(v.Content) || v.Start < 0 || v.Stop < 0 {
			return nil, fmt.Errorf("%s: content %q start %d stop %d: want one character and counts >= 0", path, v.Content, v.Start, v.Stop)
		}
		return stripDecoder{content: c, start: v.Start, stop: v.Stop}, nil
	}
	return nil, unsupported(path, "decoder", typ, "Sequence, ByteLevel, Metaspace, Replace, ByteFallback, Fuse, Strip")
}

// parsePostProcessor returns the templates the post-processor applies in order (ByteLevel adds no
// token and is left out).
func parsePostProcessor(raw json.RawMessage, path string) ([]template, error) {
	typ, err := typeOf(raw, path)
	if err != nil {
		return nil, err
	}
	switch typ {
	case "Sequence":
		lists, err := sequence(raw, path, "processors", parsePostProcessor)
		return slices.Concat(lists...), err
	case "ByteLevel":
		return nil, nil
	case "TemplateProcessing":
		var v struct {
			Single []struct {
				SpecialToken *struct {
					ID string `json:"id"`
				} `json:"SpecialToken"`
				Sequence *struct {
					ID string `json:"id"`
				} `json:"Sequence"`
			} `json:"single"`
			SpecialTokens map[string]struct {
				IDs []int `json:"ids"`
			} `json:"special_tokens"`
		}
		if err := decodeAt(raw, path, &v); err != nil {
			return nil, err
		}
		var t template
		for i, piece := range v.Single {
			p := fmt.Sprintf("%s.single[%d]", path, i)
			switch {
			case piece.Sequence != nil:
				if piece.Sequence.ID != "A" {
					return nil, fmt.Errorf("%s: sequence %q in the single template (want A)", p, piece.Sequence.ID)
				}
				t = append(t, templatePiece{sequence: true})
			case piece.SpecialToken != nil:
				st, ok := v.SpecialTokens[piece.SpecialToken.ID]
				if !ok {
					return nil, fmt.Errorf("%s: special token %q is not in %s.special_tokens", p, piece.SpecialToken.ID, path)
				}
				t = append(t, templatePiece{ids: st.IDs})
			default:
				return nil, fmt.Errorf("%s: neither SpecialToken nor Sequence", p)
			}
		}
		return []template{t}, nil
	}
	return nil, unsupported(path, "post-processor", typ, "Sequence, ByteLevel, TemplateProcessing")
}
