package models_test

import (
	"flag"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/gomlx/gomlx/pkg/ml/context"

	"github.com/onegpu/onegpu/analysis"
	"github.com/onegpu/onegpu/internal/testkit"
	"github.com/onegpu/onegpu/layers"
	"github.com/onegpu/onegpu/mixed"
	"github.com/onegpu/onegpu/models"
	"github.com/onegpu/onegpu/remat"
)

var (
	longPreset    = flag.String("models.preset", "llama-3.2-1b", "BenchmarkLlamaLongSequence: the Llama preset")
	longSeqs      = flag.String("models.seqs", "2048,4096,8192", "BenchmarkLlamaLongSequence: sequence lengths")
	longAttention = flag.String("models.attention", "plain;chunked=1024", "BenchmarkLlamaLongSequence: attentions (layers.ParseAttention), ';'-separated")
	longLoss      = flag.String("models.cross-entropy", "chunked", "BenchmarkLlamaLongSequence: the cross-entropy of the chunked attentions (plain attention keeps the plain loss)")
)

// BenchmarkLlamaLongSequence compiles (on XLA, compile only) the gradient step of a Llama preset
// (bfloat16 compute with float32 parameters, remat of whole blocks, batch 1, no optimizer) at each
// sequence length and attention given, plain attention with the plain loss and chunked attention
// with -models.cross-entropy, and reports XLA's temporary bytes and compile time:
//
//	ONEGPU_PJRT_PLUGIN=/abs/pjrt_c_api_cpu_plugin.so go test -run '^$' -bench LlamaLongSequence -benchtime 1x -timeout 2h ./models/ \
//	    -args -models.seqs 2048,8192 -models.attention 'plain;chunked=1024;chunked=2048;chunked=512x1000000'
//
// Metrics: xla-GiB, XLA's temporaries (all but the arguments: weights and data); est-GiB, onegpu's
// estimate (analysis.Analyze, sequential order); nodes; compile-s and compile-cpu-s.
func BenchmarkLlamaLongSequence(b *testing.B) {
	xla := testkit.RequireXLA(b)
	config, err := models.LlamaPreset(*longPreset)
	if err != nil {
		b.Fatal(err)
	}
	m, err := models.NewLlama(config)
	if err != nil {
		b.Fatal(err)
	}
	chunkedLoss, err := layers.ParseCrossEntropy(*longLoss)
	if err != nil {
		b.Fatal(err)
	}
	for _, seqText := range strings.Split(*longSeqs, ",") {
		seq, err := strconv.Atoi(seqText)
		if err != nil {
			b.Fatalf("-models.seqs %q: %v", *longSeqs, err)
		}
		for _, text := range strings.Split(*longAttention, ";") {
			attention, err := layers.ParseAttention(text)
			if err != nil {
				b.Fatal(err)
			}
			loss := layers.CrossEntropy{}
			if attention.Chunked {
				loss = chunkedLoss
			}
			b.Run(fmt.Sprintf("seq=%d/attention=%s/cross-entropy=%s", seq, attention, loss), func(b *testing.B) {
				for b.Loop() {
					in := []shapes.Shape{shapes.Make(dtypes.Int32, 1, seq), shapes.Make(dtypes.Int32, 1, seq)}
					p, err := analysis.ContextProgram(xla, context.New(), "llama", in, func(ctx *context.Context, in []*graph.Node) []*graph.Node {
						mixed.SetPolicy(ctx, mixed.Policy{Param: dtypes.Float32, Compute: dtypes.BFloat16, Output: dtypes.Float32})
						remat.SetBlocks(ctx, remat.Config{}, "block")
						layers.SetAttention(ctx, attention)
						layers.SetCrossEntropy(ctx, loss)
						sum, count := m.CrossEntropy(ctx, in[0], in[1], nil)
						mean := graph.Div(sum, count)
						var wrt []*graph.Node
						for v := range ctx.IterVariables() {
							wrt = append(wrt, v.ValueGraph(mean.Graph()))
						}
						return append([]*graph.Node{mean}, graph.Gradient(mean, wrt...)...)
					})
					if err != nil {
						b.Fatal(err)
					}
					testkit.ReportCompile(b, p, 1<<30, "GiB")
				}
			})
		}
	}
}
