package infer_test

import (
	"testing"

	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/gomlx/gomlx/pkg/ml/context"

	"github.com/onegpu/onegpu/infer"
	"github.com/onegpu/onegpu/internal/testkit"
	"github.com/onegpu/onegpu/mixed"
	"github.com/onegpu/onegpu/models"
	"github.com/onegpu/onegpu/train"
)

// BenchmarkGenerate times greedy generation on the tiny Llama preset (2 layers, hidden 64, 256
// positions; random weights) with and without the KV cache, on the embedded backend and on XLA
// when $ONEGPU_PJRT_PLUGIN names a plugin: a prompt of 16 tokens and 200 new ones, compiled before
// the timing. tokens/s is the decoding rate after the first token (Result.TokensPerSecond):
//
//	go test ./infer -run NONE -bench Generate -benchtime 3x
func BenchmarkGenerate(b *testing.B) {
	config, err := models.LlamaPreset("tiny")
	if err != nil {
		b.Fatal(err)
	}
	m := must(models.NewLlama(config))
	prompt := make([]int32, 16)
	for i := range prompt {
		prompt[i] = int32(7 * i % config.Vocab)
	}
	for _, backend := range testkit.All() {
		// Weights: the model's own initializers, created by one forward pass.
		ctx := context.New()
		if _, err := context.ExecOnce(backend, ctx, func(ctx *context.Context, tokens *graph.Node) *graph.Node {
			train.Settings{Policy: mixed.Float32}.Apply(ctx, tokens.Graph())
			return m.Logits(ctx, tokens)
		}, tensors.FromFlatDataAndDimensions(prompt, 1, len(prompt))); err != nil {
			b.Fatal(err)
		}
		g, err := infer.New(backend, m, ctx.Reuse(), train.Settings{Policy: mixed.Float32})
		if err != nil {
			b.Fatal(err)
		}
		for _, noCache := range []bool{false, true} {
			name := backend.Name() + "/cache"
			if noCache {
				name = backend.Name() + "/no-cache"
			}
			b.Run(name, func(b *testing.B) {
				o := infer.Options{MaxNewTokens: 200, NoCache: noCache}
				if _, err := g.Generate(prompt, o); err != nil { // compiles, outside the timing
					b.Fatal(err)
				}
				var tokens, seconds float64
				for b.Loop() {
					r, err := g.Generate(prompt, o)
					if err != nil {
						b.Fatal(err)
					}
					tokens += float64(len(r.Tokens) - 1)
					seconds += r.Decode.Seconds()
				}
				b.ReportMetric(tokens/seconds, "tokens/s")
			})
		}
		g.Close()
	}
}
