package train

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"sync"

	"github.com/onegpu/onegpu/train/checkpoint"
)

// A checkpoint records its model's Go type and its value as JSON (checkpoint.WrittenBy.ModelType
// and ModelConfig), so that Load rebuilds the model from the checkpoint's path alone: it decodes
// the value into a new one of the type registered under that name. train knows no concrete model:
// onegpu's models (the tutorial's GPT and classifier, the Llama-class families) are registered by
// package recipes, whose one registration per family serves the CLI and Load; a model of your own
// is one RegisterModel call.

var (
	modelTypesMu sync.Mutex
	modelTypes   = map[string]reflect.Type{}
)

// RegisterModel lets Load rebuild models of prototype's type (its value is not used) from the
// checkpoints that record one: call it once, e.g. in an init function, before Load. The type must
// survive encoding/json (exported fields, or its own MarshalJSON and UnmarshalJSON); a value JSON
// cannot write (a func field) leaves the checkpoint without the model's config, and Load says
// so. Registering a type again changes nothing.
func RegisterModel(prototype Model) {
	if prototype == nil {
		panic("train.RegisterModel: a nil model; give a value of the model's type, e.g. train.RegisterModel(MyModel{})")
	}
	t := reflect.TypeOf(prototype)
	modelTypesMu.Lock()
	defer modelTypesMu.Unlock()
	modelTypes[modelTypeName(t)] = t
}

// modelTypeName names a model's Go type with its package path ("github.com/onegpu/onegpu/models.GPT",
// "*example.com/mine.Model"), so that two packages' types of one name stay apart.
func modelTypeName(t reflect.Type) string {
	if t.Kind() == reflect.Pointer {
		return "*" + modelTypeName(t.Elem())
	}
	if t.PkgPath() == "" {
		return t.String()
	}
	return t.PkgPath() + "." + t.Name()
}

// modelRecord is what a checkpoint records of m to rebuild it: its type's name and its value as
// JSON (nil when JSON cannot write it).
func modelRecord(m Model) (string, json.RawMessage) {
	if m == nil {
		return "", nil
	}
	raw, err := json.Marshal(m)
	if err != nil {
		raw = nil
	}
	return modelTypeName(reflect.TypeOf(m)), raw
}

// modelFromRecord rebuilds the model w records, checks it (its Validate method, when it has one)
// and that it describes itself as the checkpoint says.
func modelFromRecord(w checkpoint.WrittenBy) (Model, error) {
	if w.ModelType == "" {
		return nil, fmt.Errorf("it records its model as %q but not its type and config (onegpu %s wrote it, before checkpoints recorded them): "+
			"build the model and train.Config yourself and restore it with OpenCheckpoints and Trainer.Run", w.Model, w.Onegpu)
	}
	modelTypesMu.Lock()
	t, ok := modelTypes[w.ModelType]
	modelTypesMu.Unlock()
	if !ok {
		return nil, fmt.Errorf("its model is a %s, a type this program has not registered: call train.RegisterModel with a value of it before Load "+
			"(onegpu's own models register when the program imports github.com/onegpu/onegpu/recipes)", w.ModelType)
	}
	if len(w.ModelConfig) == 0 {
		return nil, fmt.Errorf("its model %s (%s) could not be written as JSON when it was saved (a field JSON cannot hold, such as a func?): "+
			"give the type JSON methods, or build the model yourself", w.Model, w.ModelType)
	}
	ptr := t.Kind() == reflect.Pointer
	elem := t
	if ptr {
		elem = t.Elem()
	}
	value := reflect.New(elem)
	decoder := json.NewDecoder(bytes.NewReader(w.ModelConfig))
	if err := decoder.Decode(value.Interface()); err != nil {
		return nil, fmt.Errorf("its model's config (%s) does not decode: %w", w.ModelType, err)
	}
	if !ptr {
		value = value.Elem()
	}
	m := value.Interface().(Model)
	if v, ok := m.(interface{ Validate() error }); ok {
		if err := v.Validate(); err != nil {
			return nil, fmt.Errorf("its model's config: %w", err)
		}
	}
	if got := describeModel(m); got != w.Model {
		return nil, fmt.Errorf("its model's config rebuilds %s, where the checkpoint records %s: the manifest's model_config was edited or damaged",
			got, w.Model)
	}
	return m, nil
}
