package train_test

import (
	"testing"

	"github.com/onegpu/onegpu/internal/testkit"
	"github.com/onegpu/onegpu/mixed"
	"github.com/onegpu/onegpu/train"
)

// TestStreamedBF16Bus: under a bfloat16 compute policy the streamed step sends the weights its
// programs read in bfloat16 as bfloat16 copies of the float32 masters: the tiny GPT reads every
// weight so (the embedding table after its gather), so the bytes to the device per step are the
// weights' in bfloat16 and the tokens (streamedUpload), and the losses are the staged step's (the same stage
// programs with the float32 weights on the device), bit for bit, on the embedded backend and on XLA,
// with remat of the MLP and attention (whose ties read the weights in float32, in a branch never
// taken), as the GPT and Llama recipes train.
func TestStreamedBF16Bus(t *testing.T) {
	t.Parallel()
	bf16, err := mixed.ParsePolicy("params=float32,compute=bfloat16,output=float32")
	if err != nil {
		t.Fatal(err)
	}
	for name, backend := range testkit.ByName(t) {
		t.Run(name, func(t *testing.T) {
			config := streamConfig(t)
			config.Offload, config.Remat = train.OffloadParams, train.Remat{Kinds: []string{"mlp", "attn"}}
			config.Policy = bf16
			tr, streamed := runOffload(t, backend, config, 3, "")
			tr.Close()
			got, f32 := streamStats(t, streamed.Offload).BytesToDevice, float32Upload(config)
			t.Logf("bytes to the device a step: %d in bfloat16, %d with float32 weights (%.3fx)", got, f32, float64(got)/float64(f32))
			if want := streamedUpload(config); got != want {
				t.Errorf("%d bytes to the device a step, want %d: every weight in bfloat16", got, want)
			}
			config.Offload = train.OffloadStaged
			tr, staged := runOffload(t, backend, config, 3, "")
			tr.Close()
			sameLosses(t, staged, streamed, 0)
		})
	}
}

// float32Upload is streamedUpload with float32 weights, for the log.
func float32Upload(config train.Config) int64 {
	config.Policy = mixed.Float32
	return streamedUpload(config)
}
