package train

import (
	"fmt"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/ml/context"

	"github.com/onegpu/onegpu/hf"
	"github.com/onegpu/onegpu/mixed"
	"github.com/onegpu/onegpu/models"
)

// LoadHF opens a Hugging Face Llama checkpoint folder (config.json with model.safetensors, or
// shards with their index) as Load opens onegpu's: a Loaded model whose Loss and Generate compute
// under policy on backend (which Close leaves to the caller), its weights read in policy's
// parameter dtype by their Hugging Face names (hf.LoadWeights). seq is the sequence length Loss
// takes and Generate reads (its batches are [n, seq] tokens and labels); 0 keeps config.json's
// (hf.DefaultSeqLen, at most max_position_embeddings). A config the Llama cannot hold or a
// missing or misshapen tensor is an error naming it (hf.ReadConfig, hf.LoadWeights).
//
//	f32, _ := mixed.ParsePolicy("float32")
//	m, err := train.LoadHF(backend, "TinyLlama-1.1B", f32, 512)
//	loss, metrics, err := m.Loss([]*tensors.Tensor{tokens, labels})
func LoadHF(backend backends.Backend, dir string, policy mixed.Policy, seq int) (*Loaded, error) {
	c, err := hf.ReadConfig(dir)
	if err != nil {
		return nil, err
	}
	if seq < 0 {
		return nil, fmt.Errorf("load %s: sequence length %d: give a positive length, or 0 for config.json's", dir, seq)
	}
	if seq > 0 {
		c.SeqLen = seq
	}
	m, err := models.NewLlama(c)
	if err != nil {
		return nil, fmt.Errorf("load %s: %w", dir, err)
	}
	if err := policy.Validate(backend); err != nil {
		return nil, err
	}
	ctx := context.New()
	if err := hf.LoadWeights(ctx, dir, c, policy.Param); err != nil {
		return nil, err
	}
	// Reuse: every variable comes from the checkpoint; one the graph asks for and the folder
	// lacks is an error, not a fresh random weight.
	return &Loaded{Model: m, Policy: policy, Dir: dir, Backend: backend, Ctx: ctx.Reuse()}, nil
}
