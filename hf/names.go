package hf

import (
	"fmt"
	"strings"

	"github.com/gomlx/gomlx/pkg/ml/context"

	"github.com/onegpu/onegpu/models"
)

// TensorSpec is one tensor of a model as a Hugging Face checkpoint names it, with its shape.
type TensorSpec struct {
	Name  string // e.g. "model.layers.0.self_attn.q_proj.weight"
	Shape []int  // e.g. [heads·head_dim, hidden]: linear weights are [out_features, in_features]
}

// LlamaTensors lists the tensors of a Llama of config c, in the order of the model (embeddings,
// layers, final norm, output layer), as LlamaForCausalLM names and shapes them: the same names
// and layouts as models.Llama's variables (see VariableOf). lm_head.weight is absent with tied
// embeddings.
func LlamaTensors(c models.LlamaConfig) []TensorSpec {
	q, kv := c.Heads*c.HeadDim, c.KVHeads*c.HeadDim
	specs := []TensorSpec{{"model.embed_tokens.weight", []int{c.Vocab, c.Hidden}}}
	for i := range c.Layers {
		p := fmt.Sprintf("model.layers.%d.", i)
		specs = append(specs,
			TensorSpec{p + "input_layernorm.weight", []int{c.Hidden}},
			TensorSpec{p + "self_attn.q_proj.weight", []int{q, c.Hidden}},
			TensorSpec{p + "self_attn.k_proj.weight", []int{kv, c.Hidden}},
			TensorSpec{p + "self_attn.v_proj.weight", []int{kv, c.Hidden}},
			TensorSpec{p + "self_attn.o_proj.weight", []int{c.Hidden, q}},
			TensorSpec{p + "post_attention_layernorm.weight", []int{c.Hidden}},
			TensorSpec{p + "mlp.gate_proj.weight", []int{c.Intermediate, c.Hidden}},
			TensorSpec{p + "mlp.up_proj.weight", []int{c.Intermediate, c.Hidden}},
			TensorSpec{p + "mlp.down_proj.weight", []int{c.Hidden, c.Intermediate}},
		)
	}
	specs = append(specs, TensorSpec{"model.norm.weight", []int{c.Hidden}})
	if !c.TiedEmbeddings {
		specs = append(specs, TensorSpec{"lm_head.weight", []int{c.Vocab, c.Hidden}})
	}
	return specs
}

// VariableOf maps a Hugging Face tensor name to the context scope and variable name that hold it,
// relative to ctx's scope: the dot-separated parts but the last are scopes, the last is the
// variable ("model.norm.weight" is the variable "weight" in scope ctx.In("model").In("norm")).
func VariableOf(ctx *context.Context, tensorName string) (scope *context.Context, variable string) {
	parts := strings.Split(tensorName, ".")
	scope = ctx
	for _, p := range parts[:len(parts)-1] {
		scope = scope.In(p)
	}
	return scope, parts[len(parts)-1]
}

// lookupVariable returns the variable holding tensorName under ctx, or nil.
func lookupVariable(ctx *context.Context, tensorName string) *context.Variable {
	scope, name := VariableOf(ctx, tensorName)
	return scope.GetVariableByScopeAndName(scope.Scope(), name)
}
