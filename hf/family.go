package hf

import (
	"fmt"
	"sort"
	"strings"
	"sync"
)

// Family is how the models of one Hugging Face model_type are kept in a folder: config.json's
// model_type and the class transformers builds from it, how config.json reads into an onegpu
// model, and which onegpu models the family writes back. ReadConfig, Open and Export work through
// the registered families, not a model type of their own: the Llama's ("llama", and "mistral"
// on sequences within its sliding window, in llama.go) and Qwen2's ("qwen2", qwen2.go) register themselves; a
// family of one's own is a RegisterFamily call.
type Family struct {
	// ModelType is config.json's model_type, e.g. "llama".
	ModelType string
	// Architecture is the causal language model class transformers builds for it, e.g.
	// "LlamaForCausalLM": a config.json whose architectures name another class is refused.
	Architecture string
	// Read builds the family's model from config.json: r reads its fields, with errors that name
	// the file and the field, and says the training sequence length asked for (ConfigReader.SeqLen).
	Read func(r *ConfigReader) (Layout, error)
	// Describe returns an onegpu model (a train.Model, such as a models.Llama) as this family
	// holds it, or false when the family does not write that model (Export finds a model's family
	// this way). Nil for a family that is only read (Mistral's checkpoints are written as Llama's).
	Describe func(model any) (Layout, bool)
}

// Layout is one model as a Hugging Face folder holds it: the onegpu model, its tensors, and the
// fields of config.json that describe it. Its family (Family.Read, Family.Describe) makes it.
type Layout interface {
	// Model is the onegpu model (a train.Model, e.g. a models.Llama; hf sits below train and
	// cannot name that interface).
	Model() any
	// Tensors lists the model's tensors by their Hugging Face names, with their shapes, in the
	// model's order (the order Export writes them in).
	Tensors() []TensorSpec
	// Aliases maps tensors a folder may hold as copies of another to the tensor they copy, e.g.
	// "lm_head.weight" to "model.embed_tokens.weight" with tied embeddings: loading accepts such a
	// tensor when it equals its original, and refuses it otherwise.
	Aliases() map[string]string
	// Config returns the fields of config.json that describe the model: model_type,
	// architectures, its sizes and everything its math depends on (Export writes them).
	Config() map[string]any
	// Params is the number of parameters: the elements of Tensors.
	Params() int64
	// Layers is the number of numbered layers ("model.layers.N."): loading checks it against the
	// files' before it lists the tensors of a config.json that may ask for 10^9 of them.
	Layers() int
}

var (
	familiesMu sync.Mutex
	families   = map[string]Family{}
)

// RegisterFamily makes f the family of its model_type for ReadConfig, Open and Export. It panics
// when the model_type is empty or taken, or f has no Architecture or Read: families are registered
// once, at init.
func RegisterFamily(f Family) {
	familiesMu.Lock()
	defer familiesMu.Unlock()
	if _, taken := families[f.ModelType]; f.ModelType == "" || taken || f.Architecture == "" || f.Read == nil {
		panic(fmt.Sprintf("hf.RegisterFamily(%q): the model_type is empty or taken, or the family has no Architecture or Read", f.ModelType))
	}
	families[f.ModelType] = f
}

// FamilyTypes lists the registered model_types, sorted.
func FamilyTypes() []string {
	familiesMu.Lock()
	defer familiesMu.Unlock()
	types := make([]string, 0, len(families))
	for t := range families {
		types = append(types, t)
	}
	sort.Strings(types)
	return types
}

// refused explains model types onegpu has no family for whose checkpoints look close to one it
// has: the tensors or the math differ.
var refused = map[string]string{
	"qwen3":   "Qwen3 normalizes queries and keys per head (q_norm, k_norm)",
	"gemma":   "Gemma scales embeddings, adds 1 to its norm weights and uses GELU",
	"gemma2":  "Gemma 2 soft-caps logits and alternates sliding-window layers",
	"phi3":    "Phi-3 fuses q/k/v and gate/up into single tensors",
	"mixtral": "Mixtral's MLP is a mixture of experts",
}

// familyOf returns the family registered for modelType, or an error saying why there is none.
func familyOf(modelType string) (Family, error) {
	familiesMu.Lock()
	f, ok := families[modelType]
	familiesMu.Unlock()
	if ok {
		return f, nil
	}
	why := fmt.Sprintf("onegpu reads model_type %s", strings.Join(quoted(FamilyTypes()), ", "))
	if r := refused[modelType]; r != "" {
		why = r + "; " + why
	}
	return Family{}, fmt.Errorf("%q is not supported: %s", modelType, why)
}

// Describe returns model (an onegpu model) as the registered family that writes it holds it, or
// an error naming the model and the families.
func Describe(model any) (Layout, error) {
	for _, t := range FamilyTypes() {
		familiesMu.Lock()
		f := families[t]
		familiesMu.Unlock()
		if f.Describe == nil {
			continue
		}
		if l, ok := f.Describe(model); ok {
			return l, nil
		}
	}
	return nil, fmt.Errorf("no Hugging Face family writes the model %v (a %T): the families are %s", model, model, strings.Join(FamilyTypes(), ", "))
}

// quoted returns each string in double quotes.
func quoted(s []string) []string {
	q := make([]string, len(s))
	for i, v := range s {
		q[i] = fmt.Sprintf("%q", v)
	}
	return q
}
