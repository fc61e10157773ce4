package train_test

import (
	"strings"
	"testing"

	"github.com/onegpu/onegpu/analysis"
	"github.com/onegpu/onegpu/data"
	"github.com/onegpu/onegpu/internal/testkit"
	"github.com/onegpu/onegpu/layers"
	"github.com/onegpu/onegpu/quant"
	"github.com/onegpu/onegpu/train"
)

// TestStreamedLoRA: a LoRA run (rank 4 on every projection of the tiny Llama, 2 micro-batches)
// streamed from host memory (--offload params) takes the whole step's losses within 1e-5
// relative, with the base as floats and in NF4 (QLoRA); per step the frozen base crosses to the
// device as it is stored (NF4 codes and scales for QLoRA) once per direction for the blocks, once
// for the head and the embedding (which is not run backward: nothing in it trains), with the
// batch, and only the adapters' float32 gradients come back.
func TestStreamedLoRA(t *testing.T) {
	for name, q := range map[string]quant.Config{"lora": {}, "qlora": quant.QLoRA()} {
		t.Run(name, func(t *testing.T) {
			config := llamaReference(t)
			config.MicroBatches = 2
			config.LoRA = layers.LoRA{Rank: 4, Alpha: 8, Targets: allProjections, Quantize: q}
			seq, _ := config.Model.(train.LanguageModel).TokenShape()
			batches, err := data.NewText(data.Corpus, config.Batch, seq, 2)
			if err != nil {
				t.Fatal(err)
			}
			run := func(c train.Config) (*train.Trainer, *train.History) {
				tr, err := train.New(testkit.Embedded(), c)
				if err != nil {
					t.Fatal(err)
				}
				h, err := tr.Run(batches, train.RunOptions{Steps: 4})
				if err != nil {
					t.Fatal(err)
				}
				return tr, h
			}
			whole, want := run(config)
			whole.Close()
			config.Offload = train.OffloadParams
			streamed, got := run(config)
			defer streamed.Close()
			sameLosses(t, want, got, 1e-5)
			if !(got.Steps[3].Loss < got.Steps[0].Loss) {
				t.Errorf("losses %v: want a fall", got.Steps)
			}
			var blocks, embed, head, adapters int64
			for v := range streamed.Ctx.IterVariables() {
				bytes := int64(v.Shape().Memory())
				switch name := v.ScopeAndName(); {
				case layers.IsAdapter(v):
					adapters += int64(v.Shape().Size())
					blocks += bytes
				case !analysis.IsWeight(streamed.Ctx, v):
				case strings.HasPrefix(name, "/model/layers/"):
					blocks += bytes
				case strings.HasPrefix(name, "/model/embed_tokens/"):
					embed, head = embed+bytes, head+bytes // tied: the head's weight too
				default:
					head += bytes
				}
			}
			tokens := int64(2 * 4 * config.Batch * seq)
			stats := streamStats(t, streamed.ExecutorStats())
			if stats.BytesToHost != 4*adapters || stats.BytesToDevice != 2*blocks+embed+head+tokens {
				t.Errorf("traffic %d bytes to the device, %d back: want %d (blocks twice %d, embedding %d, head %d, batch %d) and the adapters' gradients %d",
					stats.BytesToDevice, stats.BytesToHost, 2*blocks+embed+head+tokens, blocks, embed, head, tokens, 4*adapters)
			}
			t.Logf("%s: per step %d bytes to the device (the blocks %d each way), %d back", name, stats.BytesToDevice, blocks, stats.BytesToHost)
		})
	}
}
