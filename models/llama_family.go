package models

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
)

// LlamaFamily is a family of Llama-class models (a Hugging Face model_type whose checkpoints
// models.Llama computes) with presets of its published shapes: the Llama's ("llama", LlamaPresets)
// and Qwen2's ("qwen2", qwen2.go). String names a model by the family and preset of its shape, and
// the CLI's --model takes each family's name with its presets (recipes registers them all). A family
// is one file: its presets and a RegisterLlamaFamily call in an init.
type LlamaFamily struct {
	// Name is how String names the family's models: "Llama", "Qwen2".
	Name string
	// Summary says what the family is, in one line for --help.
	Summary string
	// Presets are the family's shapes by name; their SeqLen is a training length of the caller's
	// choosing, MaxPositions the model's.
	Presets map[string]LlamaConfig
}

var (
	llamaFamiliesMu sync.Mutex
	llamaFamilies   = map[string]LlamaFamily{}
)

func init() {
	RegisterLlamaFamily("llama", LlamaFamily{Name: "Llama", Summary: "a Llama-class decoder (RMSNorm, rotary, SwiGLU, grouped-query attention)",
		Presets: LlamaPresets})
}

// RegisterLlamaFamily adds the family f under key, the name --model gives it. It panics when the
// key is empty or taken, or f has no Name or presets: families are registered once, at init.
func RegisterLlamaFamily(key string, f LlamaFamily) {
	llamaFamiliesMu.Lock()
	defer llamaFamiliesMu.Unlock()
	if _, taken := llamaFamilies[key]; key == "" || taken || f.Name == "" || len(f.Presets) == 0 {
		panic(fmt.Sprintf("models.RegisterLlamaFamily(%q): the key is empty or taken, or the family has no Name or presets", key))
	}
	llamaFamilies[key] = f
}

// LlamaFamilyNames lists the keys of the registered Llama families, sorted ("llama", "qwen2").
func LlamaFamilyNames() []string {
	llamaFamiliesMu.Lock()
	defer llamaFamiliesMu.Unlock()
	return slices.Sorted(maps.Keys(llamaFamilies))
}

// LlamaFamilyOf returns the Llama family registered under key.
func LlamaFamilyOf(key string) (LlamaFamily, bool) {
	llamaFamiliesMu.Lock()
	defer llamaFamiliesMu.Unlock()
	f, ok := llamaFamilies[key]
	return f, ok
}

// Preset returns the named preset, or an error listing the family's presets. The returned config
// shares no memory with the table.
func (f LlamaFamily) Preset(name string) (LlamaConfig, error) {
	c, ok := f.Presets[name]
	if !ok {
		return LlamaConfig{}, fmt.Errorf("unknown %s preset %q: the presets are %s", f.Name, name, strings.Join(f.PresetNames(), ", "))
	}
	if c.RopeScaling != nil {
		scaling := *c.RopeScaling
		c.RopeScaling = &scaling
	}
	return c, nil
}

// PresetNames lists the family's presets, sorted.
func (f LlamaFamily) PresetNames() []string { return slices.Sorted(maps.Keys(f.Presets)) }

// llamaName names the shape of c: the family and the presets it is ("Llama tiny", "Qwen2
// qwen2.5-0.5b"), or "Llama" when it is none.
func llamaName(c LlamaConfig) string {
	name := "Llama"
	var presets []string
	for _, key := range LlamaFamilyNames() {
		f, _ := LlamaFamilyOf(key)
		for _, preset := range f.PresetNames() {
			if sameLlamaShape(f.Presets[preset], c) {
				if len(presets) == 0 {
					name = f.Name
				}
				presets = append(presets, preset)
			}
		}
	}
	return strings.Join(append([]string{name}, presets...), " ")
}
