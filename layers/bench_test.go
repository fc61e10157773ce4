package layers_test

import (
	"flag"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"

	"github.com/onegpu/onegpu/internal/testkit"
)

var (
	benchSeqs   = flag.String("layers.seqs", "2048,4096,8192", "BenchmarkChunkedCompile: sequence lengths")
	benchBlocks = flag.String("layers.blocks", "512,1024,2048", "BenchmarkChunkedCompile: block sizes (queries and keys)")
)

// llamaLayer is one layer of Llama-3.2-1B's shape (hidden 2048, 32 query heads sharing 8 key/value
// heads of 64, bfloat16 compute) with a small vocabulary, so that the attention's memory shows.
var llamaLayer = oneLayer{hidden: 2048, heads: 32, kvHeads: 8, vocab: 1024, compute: dtypes.BFloat16, lossChunk: 1024}

// BenchmarkChunkedCompile builds and compiles (on XLA, compile only) the gradient step of one
// llamaLayer with plain attention, chunked attention of each block size in -layers.blocks, and
// queries-only blocks of 512 (keys: the whole causal prefix at once), at each sequence length in
// -layers.seqs, and reports what unrolling costs:
//
//	ONEGPU_PJRT_PLUGIN=/abs/pjrt_c_api_cpu_plugin.so go test -run '^$' -bench ChunkedCompile -benchtime 1x ./layers/
//
// Metrics: nodes, the graph's node count (forward, backward and ties); compile-s and compile-cpu-s,
// XLA's compile time, wall and the process's CPU time (steadier on a shared machine); xla-MiB,
// XLA's temporary bytes; est-MiB, onegpu's estimate (analysis.Analyze) of the peak above the inputs.
func BenchmarkChunkedCompile(b *testing.B) {
	xla := testkit.RequireXLA(b)
	variants := []oneLayer{llamaLayer}
	for _, block := range intList(b, *benchBlocks) {
		m := llamaLayer
		m.attentionBlock = block
		variants = append(variants, m)
	}
	queriesOnly := llamaLayer
	queriesOnly.attentionBlock, queriesOnly.keyBlock = 512, 1<<30
	variants = append(variants, queriesOnly)
	for _, seq := range intList(b, *benchSeqs) {
		for _, m := range variants {
			if m.attentionBlock == 0 && seq > 4096 {
				continue // plain attention's scores: 32 heads x seq² float32, 8 GiB at 8192
			}
			name := strings.ReplaceAll(m.String(), fmt.Sprint(1<<30), "all")
			b.Run(fmt.Sprintf("seq=%d/%s", seq, name), func(b *testing.B) {
				for b.Loop() {
					testkit.ReportCompile(b, m.program(xla, seq), 1<<20, "MiB")
				}
			})
		}
	}
}

// stepLayer is a smaller layer whose step runs in about a second on two CPU cores.
var stepLayer = oneLayer{hidden: 512, heads: 8, kvHeads: 2, vocab: 8192, compute: dtypes.Float32}

// BenchmarkChunkedStep runs the gradient step of stepLayer at sequence 2048 on XLA with plain
// attention and loss, and with chunked attention (block 512) and loss (chunk 1024), in rounds of
// one step each so that the ratio compares steps run under the same load:
//
//	ONEGPU_PJRT_PLUGIN=/abs/pjrt_c_api_cpu_plugin.so go test -run '^$' -bench ChunkedStep -benchtime 5x ./layers/
//
// Metrics: plain-ms/step and chunked-ms/step (means), chunked/plain (median of the rounds' ratios).
func BenchmarkChunkedStep(b *testing.B) {
	xla := testkit.RequireXLA(b)
	const seq = 2048
	chunked := stepLayer
	chunked.attentionBlock, chunked.lossChunk = 512, 1024
	inputs := stepInputs(seq, stepLayer)
	var execs []*graph.Exec
	for _, m := range []oneLayer{stepLayer, chunked} {
		exec, err := graph.NewExec(xla, m.step)
		if err != nil {
			b.Fatal(err)
		}
		defer exec.Finalize()
		if _, err := exec.Exec(inputs...); err != nil { // compile
			b.Fatal(err)
		}
		execs = append(execs, exec)
	}
	elapsed := make([]time.Duration, 2)
	var ratios []float64
	for b.Loop() {
		var round [2]time.Duration
		for i, exec := range execs {
			start := time.Now()
			outs, err := exec.Exec(inputs...)
			if err != nil {
				b.Fatal(err)
			}
			for _, o := range outs {
				o.FinalizeAll()
			}
			round[i] = time.Since(start)
			elapsed[i] += round[i]
		}
		ratios = append(ratios, float64(round[1])/float64(round[0]))
	}
	b.ReportMetric(float64(elapsed[0].Milliseconds())/float64(b.N), "plain-ms/step")
	b.ReportMetric(float64(elapsed[1].Milliseconds())/float64(b.N), "chunked-ms/step")
	b.ReportMetric(median(ratios), "chunked/plain")
}

func intList(b *testing.B, list string) []int {
	var out []int
	for _, f := range strings.Split(list, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil {
			b.Fatalf("%q: want a comma-separated list of integers", list)
		}
		out = append(out, n)
	}
	return out
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[len(s)/2]
}
