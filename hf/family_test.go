package hf_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/onegpu/onegpu/hf"
	"github.com/onegpu/onegpu/internal/testkit"
	"github.com/onegpu/onegpu/models"
)

// TestFamilies: the Llama's families are registered; a model is described by the family that
// writes it (a Llama by "llama", its config.json fields and tensors counting its parameters), a
// model no family writes is an error naming the families, and a model_type is registered once.
func TestFamilies(t *testing.T) {
	types := hf.FamilyTypes()
	if !slices.Contains(types, "llama") || !slices.Contains(types, "mistral") || !slices.IsSorted(types) {
		t.Errorf("families %v", types)
	}
	l, err := hf.Describe(models.Llama{Config: untiedConfig})
	if err != nil {
		t.Fatal(err)
	}
	fields := l.Config()
	if fields["model_type"] != "llama" || !slices.Equal(fields["architectures"].([]string), []string{"LlamaForCausalLM"}) || fields["attention_bias"] != false {
		t.Errorf("config.json fields %v", fields)
	}
	var n int64
	for _, spec := range l.Tensors() {
		size := int64(1)
		for _, d := range spec.Shape {
			size *= int64(d)
		}
		n += size
	}
	if n != l.Params() || n != untiedConfig.Params() || l.Aliases() != nil {
		t.Errorf("tensors hold %d parameters, the layout counts %d, the config %d; aliases %v", n, l.Params(), untiedConfig.Params(), l.Aliases())
	}
	if _, err := hf.Describe(models.GPT{}); err == nil || !strings.Contains(err.Error(), "no Hugging Face family writes the model") || !strings.Contains(err.Error(), "llama") {
		t.Errorf("a GPT: %v", err)
	}
	testkit.MustPanic(t, "model_type is empty or taken", func() { hf.RegisterFamily(hf.Family{ModelType: "llama", Architecture: "X"}) })
}
