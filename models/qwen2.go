package models

// Qwen2 and Qwen2.5 (Hugging Face model_type "qwen2"): the Llama with biases on q_proj, k_proj and
// v_proj (LlamaConfig.QKVBias), rotary base 10^6 and RMSNorm ε 10^-6, tied embeddings on the
// small models; no sliding window in use. The presets are the published base models' config.json
// shapes, whose parameter counts are the published ones, and "tiny", which trains in seconds a
// step on a CPU.

// Qwen2Presets are the Qwen2 family's shapes (--model qwen2 --preset P).
var Qwen2Presets = map[string]LlamaConfig{
	"tiny": {Vocab: 256, Hidden: 64, Intermediate: 192, Layers: 2, Heads: 4, KVHeads: 2, HeadDim: 16, SeqLen: 64, MaxPositions: 256,
		RopeTheta: 1e6, NormEpsilon: 1e-6, TiedEmbeddings: true, QKVBias: true,
		Description: "2 layers, hidden 64, 4 heads of 16 on 2 key/value heads, q/k/v biases, tied embeddings, sequence 64 (seconds on a CPU)"},
	"qwen2.5-0.5b": {Vocab: 151936, Hidden: 896, Intermediate: 4864, Layers: 24, Heads: 14, KVHeads: 2, HeadDim: 64, SeqLen: 2048, MaxPositions: 32768,
		RopeTheta: 1e6, NormEpsilon: 1e-6, TiedEmbeddings: true, QKVBias: true,
		Description: "Qwen2.5-0.5B: 24 layers, hidden 896, 14 heads on 2 key/value heads, vocabulary 151936, tied embeddings (494,032,768 parameters)"},
	"qwen2.5-1.5b": {Vocab: 151936, Hidden: 1536, Intermediate: 8960, Layers: 28, Heads: 12, KVHeads: 2, HeadDim: 128, SeqLen: 2048, MaxPositions: 131072,
		RopeTheta: 1e6, NormEpsilon: 1e-6, TiedEmbeddings: true, QKVBias: true,
		Description: "Qwen2.5-1.5B: 28 layers, hidden 1536, 12 heads on 2 key/value heads, vocabulary 151936, tied embeddings (1,543,714,304 parameters)"},
	"qwen2.5-7b": {Vocab: 152064, Hidden: 3584, Intermediate: 18944, Layers: 28, Heads: 28, KVHeads: 4, HeadDim: 128, SeqLen: 2048, MaxPositions: 131072,
		RopeTheta: 1e6, NormEpsilon: 1e-6, QKVBias: true,
		Description: "Qwen2.5-7B: 28 layers, hidden 3584, 28 heads on 4 key/value heads, vocabulary 152064 (7,615,616,512 parameters)"},
}

func init() {
	RegisterLlamaFamily("qwen2", LlamaFamily{Name: "Qwen2", Presets: Qwen2Presets,
		Summary: "Qwen2 and Qwen2.5: the Llama with q/k/v biases (rotary base 1e6, tied embeddings on the small models)"})
}
