package plan

import (
	"sort"

	"github.com/onegpu/onegpu/models"
	"github.com/onegpu/onegpu/train"
)

// ScaledLlama is a Llama 3 of hidden size 128·n trained on sequences of seqLen tokens, in
// Llama-3.2-1B's proportions: n layers, heads of 64 (2n of them) on a quarter as many key/value
// heads (half as many when 2n is not a multiple of 4), an MLP 4× as wide, Llama 3's vocabulary of
// 128,256 and rotary embeddings (θ 500,000, scaling ×32 from 8192 positions), tied embeddings up to
// n = 24 (Llama 3.2's 1B and 3B tie them, 3.1's 8B does not). n = 16 is Llama-3.2-1B
// (1,235,814,400 parameters).
func ScaledLlama(n, seqLen int) models.LlamaConfig {
	c := models.LlamaPresets["llama-3.2-1b"]
	scaling := *c.RopeScaling
	c.RopeScaling = &scaling
	c.Hidden, c.Layers, c.Intermediate = 128*n, n, 4*128*n
	c.Heads = 2 * n
	c.KVHeads = c.Heads / 2
	if c.Heads%4 == 0 {
		c.KVHeads = c.Heads / 4
	}
	c.TiedEmbeddings = n <= 24
	c.SeqLen = seqLen
	c.Description = ""
	return c
}

// ScaledLlamas is ScaledLlama at sequence seqLen as a Scaled family, up to the largest n whose
// config onegpu builds (models.LlamaConfig's Validate).
func ScaledLlamas(seqLen int) Scaled {
	top := sort.Search(1<<20, func(n int) bool { return n > 0 && ScaledLlama(n, seqLen).Validate() != nil }) - 1
	return Scaled{
		Model: func(n int) (train.Model, error) { return models.NewLlama(ScaledLlama(n, seqLen)) },
		Max:   top,
		WithLayers: func(m train.Model, layers int) train.Model {
			l := m.(models.Llama)
			l.Config.Layers = layers
			return l
		},
		Name: "Llama 3 of Llama-3.2-1B's proportions (heads of 64, MLP ×4, vocabulary 128,256)",
	}
}
