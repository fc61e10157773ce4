package plan_test

import (
	"testing"

	"github.com/onegpu/onegpu/internal/testkit"
	"github.com/onegpu/onegpu/layers"
	"github.com/onegpu/onegpu/mixed"
	"github.com/onegpu/onegpu/models"
	"github.com/onegpu/onegpu/plan"
	"github.com/onegpu/onegpu/recipes"
	"github.com/onegpu/onegpu/train"
)

// TestPeakParts: the tiny Llama's float32 step at sequence 96 (not a head's 16, not the hidden 64),
// one sequence, no remat: the parts sum to the peak; with plain attention and loss the peak holds
// attention scores (at least one whole [1, 2 kv heads, 96, 2, 96] float32 tensor, 147,456 bytes,
// and masks of the same shape: a multiple of 96² bytes) and logits (whole [1, 96, 256] float32 tensors: a multiple of 98,304 bytes); the
// weights are the parameters' 4 bytes each; chunked attention and loss leave no scores and fewer
// logit bytes. Adapters (rank 4 on q_proj and v_proj) make the weights frozen weights, but for
// the adapters, which are the only trained weights.
func TestPeakParts(t *testing.T) {
	backend := testkit.Embedded()
	c := models.LlamaPresets["tiny"]
	c.SeqLen = 96
	m, err := models.NewLlama(c)
	if err != nil {
		t.Fatal(err)
	}
	f32, err := mixed.ParsePolicy("float32")
	if err != nil {
		t.Fatal(err)
	}
	config := recipes.LanguageRun(m)
	config.Batch, config.MicroBatches, config.Policy, config.Remat = 1, 1, f32, train.Remat{}
	bytesOf := func(parts []plan.Part) map[string]int64 {
		b := map[string]int64{}
		for _, p := range parts {
			b[p.Name] = p.Bytes
		}
		return b
	}

	parts, memory, err := plan.PeakParts(backend, config)
	if err != nil {
		t.Fatal(err)
	}
	plain := bytesOf(parts)
	var sum int64
	for _, p := range parts {
		sum += p.Bytes
	}
	if sum != memory.PeakBytes {
		t.Errorf("parts sum to %d bytes, the peak is %d", sum, memory.PeakBytes)
	}
	scores, logits := int64(1*2*96*2*96*4), int64(1*96*256*4)
	if b := plain[plan.PartAttentionScores]; b < scores || b%(96*96) != 0 {
		t.Errorf("plain attention: %d bytes of scores at the peak, want a multiple of 96² bytes, at least %d", b, scores)
	}
	if b := plain[plan.PartLogits]; b < logits || b%logits != 0 {
		t.Errorf("plain loss: %d bytes of logits at the peak, want a positive multiple of %d", b, logits)
	}
	if b, want := plain[plan.PartWeights], 4*c.Params(); b < want {
		t.Errorf("weights at the peak: %d bytes, want at least the parameters' %d", b, want)
	}

	config.Attention, config.CrossEntropy = layers.Attention{Chunked: true, Block: 32}, layers.CrossEntropy{Chunk: 32}
	parts, _, err = plan.PeakParts(backend, config)
	if err != nil {
		t.Fatal(err)
	}
	chunked := bytesOf(parts)
	if chunked[plan.PartAttentionScores] != 0 || chunked[plan.PartLogits] >= plain[plan.PartLogits] {
		t.Errorf("chunked: scores %d bytes (want 0), logits %d (want fewer than plain's %d)",
			chunked[plan.PartAttentionScores], chunked[plan.PartLogits], plain[plan.PartLogits])
	}
	if chunked[plan.PartFrozenWeights] != 0 {
		t.Errorf("a full fine-tune: %d bytes of frozen weights, want 0", chunked[plan.PartFrozenWeights])
	}
	t.Logf("plain: %v\nchunked: %v", plain, chunked)

	config.LoRA = layers.LoRA{Rank: 4, Targets: []string{"q_proj", "v_proj"}}
	parts, _, err = plan.PeakParts(backend, config)
	if err != nil {
		t.Fatal(err)
	}
	lora := bytesOf(parts)
	adapters := int64(4 * 4 * c.Layers * (c.Hidden + c.Heads*c.HeadDim + c.Hidden + c.KVHeads*c.HeadDim)) // A and B, float32
	if lora[plan.PartFrozenWeights] < 4*c.Params()-adapters || lora[plan.PartWeights] < adapters || lora[plan.PartWeights] > 2*adapters {
		t.Errorf("LoRA: frozen weights %d bytes (want at least the base's %d), weights %d (want the adapters' %d, at most twice)",
			lora[plan.PartFrozenWeights], 4*c.Params()-adapters, lora[plan.PartWeights], adapters)
	}
}
