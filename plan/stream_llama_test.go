package plan_test

import (
	"testing"

	"github.com/onegpu/onegpu/internal/testkit"
	"github.com/onegpu/onegpu/plan"
	"github.com/onegpu/onegpu/recipes"
)

// TestStreamedLlama8B: Llama-3.1-8B streamed: its published 8,030,261,248 parameters, float32
// masters of 4 bytes each, a block counted by hand (q and o 4096², k and v 4096 × 1024 for 8
// key/value heads of 128, the SwiGLU's three 4096 × 14336 matrices, two RMSNorm gains), untied
// embedding and output layer of 128,256 × 4096 (and the final norm's gain).
func TestStreamedLlama8B(t *testing.T) {
	config, err := recipes.Defaults("llama", "llama-3.1-8b")
	if err != nil {
		t.Fatal(err)
	}
	s, err := plan.EstimateStreamed(testkit.Embedded(), config, plan.StreamOptions{Throughput: plan.A5000})
	if err != nil {
		t.Fatal(err)
	}
	const h, kv, mlp, vocab = 4096, 8 * 128, 14336, 128256
	want := map[string]int64{"embed": vocab * h, "block": 2*h*h + 2*h*kv + 3*h*mlp + 2*h, "head": vocab*h + h}
	for _, st := range s.Stages {
		if st.Params != want[st.Name] {
			t.Errorf("%s: %d parameters, want %d", st.Name, st.Params, want[st.Name])
		}
	}
	if s.Params != 8_030_261_248 || s.MasterBytes != 4*8_030_261_248 || s.Stages[1].Count != 32 {
		t.Errorf("%d parameters (%d bytes of masters) in %d blocks, want 8,030,261,248 (%d bytes) in 32", s.Params, s.MasterBytes, s.Stages[1].Count, 4*8_030_261_248)
	}
	// 4 sequences of 2048, hidden 4096, bf16: every block's input and the head's.
	if s.KeptInputBytes != 33*4*2048*h*2 {
		t.Errorf("kept inputs %d bytes, want %d", s.KeptInputBytes, 33*4*2048*h*2)
	}
}

// TestLargestStreamedLlama: on a 24 GiB device with 128 GiB of host memory the streamed Llama 3
// (ScaledLlamas at Llama-3.1-8B's run: 4 sequences of 2048) reaches 8B parameters with Adam (16
// bytes a parameter on the host) and 12B with 8-bit Adam (about 10).
func TestLargestStreamedLlama(t *testing.T) {
	base, err := recipes.Defaults("llama", "llama-3.1-8b")
	if err != nil {
		t.Fatal(err)
	}
	for i, least := range []int64{8_000_000_000, 12_000_000_000} {
		opts := plan.StreamedTechniques[i]
		row, err := plan.LargestStreamed(testkit.Embedded(), base, plan.ScaledLlamas(2048), 24<<30, 128<<30, opts, plan.StreamOptions{Throughput: plan.A5000}, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s: %d parameters (%s), device %d, host %d bytes", opts.Name, row.Params, row.Model, row.Memory, row.HostMemory)
		if !row.Fits || row.Params < least || row.Memory > 24<<30 || row.HostMemory > 128<<30 {
			t.Errorf("%s: %+v, want at least %d parameters within both budgets", opts.Name, row, least)
		}
	}
}

// TestStreamedTiedEmbeddings: Llama-3.2-1B ties its output layer to the embedding table: the head
// uploads the table too (its weights), but the model's parameters and state count it once: the
// published 1,235,814,400, and the head's own state is its final norm's (2 × 4 × 2048 bytes).
func TestStreamedTiedEmbeddings(t *testing.T) {
	config, err := recipes.Defaults("llama", "llama-3.2-1b")
	if err != nil {
		t.Fatal(err)
	}
	s, err := plan.EstimateStreamed(testkit.Embedded(), config, plan.StreamOptions{Throughput: plan.A5000})
	if err != nil {
		t.Fatal(err)
	}
	embed, head := s.Stages[0], s.Stages[2]
	if s.Params != 1_235_814_400 || head.SharedParams != embed.Params || head.Params != embed.Params+2048 || head.StateBytes != 2*4*2048 {
		t.Errorf("%d parameters, want 1,235,814,400; embed %+v, head %+v", s.Params, embed, head)
	}
}
