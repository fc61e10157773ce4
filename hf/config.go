package hf

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"path/filepath"
	"unicode/utf8"

	"github.com/onegpu/onegpu/internal/regularfile"
)

// ConfigFile is the name of a checkpoint's model configuration.
const ConfigFile = "config.json"

// DefaultSeqLen is the training sequence length a model read from config.json gets when none is
// asked for (capped at the model's max_position_embeddings): config.json says how far the model
// reads, not how long a run trains.
const DefaultSeqLen = 2048

// ReadConfig reads dir/config.json into the model its family describes, at sequence length seq
// (0: DefaultSeqLen, capped at the model's positions). See ParseConfig; the file must be a
// regular file (or a link to one) of at most regularfile.MaxSmallBytes.
func ReadConfig(dir string, seq int) (Layout, error) {
	path := filepath.Join(dir, ConfigFile)
	raw, err := readJSON(path)
	if err != nil {
		return nil, err
	}
	return ParseConfig(raw, path, seq)
}

// readJSON reads a JSON file of a checkpoint folder whole: a regular file, or a link to one (a
// Hugging Face cache's snapshot is links into its blobs), of at most regularfile.MaxSmallBytes,
// in valid UTF-8.
func readJSON(path string) ([]byte, error) {
	raw, err := regularfile.ReadLinked(path, regularfile.MaxSmallBytes)
	if err != nil {
		return nil, err
	}
	return raw, validUTF8(raw, path)
}

// validUTF8 refuses JSON text that is not valid UTF-8, which Go's decoder would read with the bad
// bytes replaced (a key "vocab_size" with a stray byte would silently become another key).
func validUTF8(raw []byte, source string) error {
	if utf8.Valid(raw) {
		return nil
	}
	at := 0
	for at < len(raw) {
		r, n := utf8.DecodeRune(raw[at:])
		if r == utf8.RuneError && n <= 1 {
			break
		}
		at += n
	}
	return fmt.Errorf("%s is not valid UTF-8 (byte %d is 0x%02x): JSON is UTF-8; the file is damaged or not JSON", source, at, raw[at])
}

// ParseConfig parses a Hugging Face config.json (source names it in errors) into the model its
// family describes (the family registered for its model_type, see Family), at sequence length seq
// (0: DefaultSeqLen, capped at the model's positions). An unknown model_type, an architectures
// list other than the family's class, and whatever the family's Read refuses are errors naming the
// file and the field; fields that do not change the math (token ids, dtype, use_cache, ...) are
// ignored.
func ParseConfig(raw []byte, source string, seq int) (Layout, error) {
	if err := validUTF8(raw, source); err != nil {
		return nil, err
	}
	r := &ConfigReader{Source: source, seq: seq}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	if err := dec.Decode(&r.fields); err != nil {
		return nil, fmt.Errorf("%s: not a JSON object: %w", source, err)
	}
	if seq < 0 {
		return nil, fmt.Errorf("%s: sequence length %d: give a positive length, or 0 for the default (%d, at most max_position_embeddings)", source, seq, DefaultSeqLen)
	}
	modelType, isString := r.fields["model_type"].(string)
	if !isString {
		return nil, r.Errorf("model_type", "%v: missing or not a string (onegpu reads %v)", r.fields["model_type"], FamilyTypes())
	}
	f, err := familyOf(modelType)
	if err != nil {
		return nil, r.Errorf("model_type", "%v", err)
	}
	if archs, present := r.fields["architectures"]; present && archs != nil {
		list, ok := archs.([]any)
		if !ok || len(list) != 1 || list[0] != f.Architecture {
			return nil, r.Errorf("architectures", "%v: onegpu reads [%q], a causal language model's tensors", archs, f.Architecture)
		}
	}
	return f.Read(r)
}

// ConfigReader reads the fields of one config.json for a family's Read: each method's error names
// the file and the field.
type ConfigReader struct {
	// Source is the file, as errors name it.
	Source string
	seq    int
	fields map[string]any
}

// Errorf returns an error about field: "SOURCE: FIELD: message".
func (r *ConfigReader) Errorf(field, format string, args ...any) error {
	return fmt.Errorf("%s: %s: %s", r.Source, field, fmt.Sprintf(format, args...))
}

// Value returns the field's value as encoding/json decodes it (numbers as json.Number), or nil
// when it is missing or null.
func (r *ConfigReader) Value(field string) any { return r.fields[field] }

// SeqLen is the training sequence length asked for, checked against the model's positions
// (max_position_embeddings), or DefaultSeqLen capped at them when none was asked for.
func (r *ConfigReader) SeqLen(maxPositions int) (int, error) {
	if r.seq == 0 {
		return min(DefaultSeqLen, maxPositions), nil
	}
	if r.seq > maxPositions {
		return 0, r.Errorf("max_position_embeddings", "%d: the model reads at most %d positions, not sequences of %d", maxPositions, maxPositions, r.seq)
	}
	return r.seq, nil
}

// number reads a JSON number (or reports what else it found).
func number(v any) (float64, error) {
	n, ok := v.(json.Number)
	if !ok {
		if v == nil {
			return 0, fmt.Errorf("missing")
		}
		return 0, fmt.Errorf("%v is not a number", v)
	}
	f, err := n.Float64()
	if err != nil || math.IsInf(f, 0) || math.IsNaN(f) {
		return 0, fmt.Errorf("%s is not a finite number", n)
	}
	return f, nil
}

// FloatOr returns the field as a finite number, or def when it is missing or null.
func (r *ConfigReader) FloatOr(field string, def float64) (float64, error) {
	v, present := r.fields[field]
	if !present || v == nil {
		return def, nil
	}
	f, err := number(v)
	if err != nil {
		return 0, r.Errorf(field, "%v", err)
	}
	return f, nil
}

// Int returns the field as IntOr does; missing or null is an error (onegpu does not
// guess a model's shape).
func (r *ConfigReader) Int(field string) (int, error) {
	if v, present := r.fields[field]; !present || v == nil {
		return 0, r.Errorf(field, "missing (onegpu does not guess a model's shape)")
	}
	return r.IntOr(field, 0)
}

// IntOr returns the field as a non-negative integer of at most math.MaxInt32, or def when it is
// missing or null.
func (r *ConfigReader) IntOr(field string, def int) (int, error) {
	v, present := r.fields[field]
	if !present || v == nil {
		return def, nil
	}
	f, err := number(v)
	switch {
	case err != nil || f != math.Trunc(f) || f < 0:
		return 0, r.Errorf(field, "%v is not a non-negative integer", v)
	case f > math.MaxInt32:
		return 0, r.Errorf(field, "%v is more than %d, the most onegpu reads for a size or a count: the file is damaged or describes no model a machine holds", v, math.MaxInt32)
	}
	return int(f), nil
}

// BoolOr returns the field as true or false, or def when it is missing or null.
func (r *ConfigReader) BoolOr(field string, def bool) (bool, error) {
	v, present := r.fields[field]
	if !present || v == nil {
		return def, nil
	}
	b, ok := v.(bool)
	if !ok {
		return false, r.Errorf(field, "%v is not true or false", v)
	}
	return b, nil
}
