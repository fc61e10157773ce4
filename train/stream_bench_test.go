package train_test

import (
	"flag"
	"testing"
	"time"

	"github.com/onegpu/onegpu/analysis"
	"github.com/onegpu/onegpu/internal/testkit"
	"github.com/onegpu/onegpu/mixed"
	"github.com/onegpu/onegpu/models"
	"github.com/onegpu/onegpu/optim"
	"github.com/onegpu/onegpu/remat"
	"github.com/onegpu/onegpu/train"
)

var (
	streamPreset = flag.String("stream.preset", "tiny", "BenchmarkStreamedCompile: the Llama preset")
	streamSeq    = flag.Int("stream.seq", 0, "BenchmarkStreamedCompile: the sequence length (0: the preset's)")
	streamLayers = flag.Int("stream.layers", 0, "BenchmarkStreamedCompile: the number of layers (0: the preset's)")
	streamMicro  = flag.Int("stream.microbatches", 1, "BenchmarkStreamedCompile: micro-batches of one sequence each (the batch)")
	streamRemat  = flag.String("stream.remat", "block", "BenchmarkStreamedCompile: the kinds of block rematerialized (none or a list)")
)

// BenchmarkStreamedCompile builds and compiles, on XLA, a Llama preset's whole train step
// (Trainer.Program) and its streamed step's programs (Trainer.StreamedPrograms: the embedding, one
// block, the head), micro-batches of one sequence, bfloat16 compute, remat of whole blocks, and
// reports each one's building and XLA compile seconds and their ratio. The streamed programs
// compile one after the other, as the executor compiles them (compile-ratio), and again at once
// (analysis.CompilePrograms: concurrent-compile-ratio). The streamed programs do not grow with the
// layers; the whole step unrolls them all. E.g.
//
//	go test ./train/ -run XXX -bench StreamedCompile -benchtime 1x -stream.preset llama-3.2-1b
func BenchmarkStreamedCompile(b *testing.B) {
	backend := testkit.RequireXLA(b)
	c := models.LlamaPresets[*streamPreset]
	if *streamSeq > 0 {
		c.SeqLen = *streamSeq
	}
	if *streamLayers > 0 {
		c.Layers = *streamLayers
	}
	llama, err := models.NewLlama(c)
	if err != nil {
		b.Fatal(err)
	}
	policy, err := mixed.ParsePolicy("params=float32,compute=bfloat16,output=float32")
	if err != nil {
		b.Fatal(err)
	}
	kinds, err := remat.ParseKinds(*streamRemat)
	if err != nil {
		b.Fatal(err)
	}
	config := train.Config{Model: llama, Batch: *streamMicro, MicroBatches: *streamMicro, Policy: policy, Remat: train.Remat{Kinds: kinds}, Offload: train.OffloadParams,
		Schedule: optim.Constant(1e-3)}
	tr, err := train.New(backend, config)
	if err != nil {
		b.Fatal(err)
	}
	for range b.N {
		start := time.Now()
		streamed, err := tr.StreamedPrograms()
		if err != nil {
			b.Fatal(err)
		}
		streamBuild := time.Since(start)
		start = time.Now()
		for _, p := range streamed.All() {
			one := time.Now()
			if _, err := analysis.CompileProgram(p); err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(time.Since(one).Seconds(), p.Graph.Name()+"-s")
			p.Graph.Finalize()
		}
		streamCompile := time.Since(start)
		if streamed, err = tr.StreamedPrograms(); err != nil {
			b.Fatal(err)
		}
		start = time.Now()
		if _, err := analysis.CompilePrograms(streamed.All()...); err != nil {
			b.Fatal(err)
		}
		streamConcurrent := time.Since(start)
		streamed.Finalize()

		config.Offload = train.OffloadNone
		whole, err := train.New(backend, config)
		if err != nil {
			b.Fatal(err)
		}
		start = time.Now()
		p, err := whole.Program()
		if err != nil {
			b.Fatal(err)
		}
		wholeBuild := time.Since(start)
		start = time.Now()
		if _, err := analysis.CompileProgram(p); err != nil {
			b.Fatal(err)
		}
		wholeCompile := time.Since(start)
		p.Graph.Finalize()
		config.Offload = train.OffloadParams
		b.ReportMetric(streamBuild.Seconds(), "stream-build-s")
		b.ReportMetric(streamCompile.Seconds(), "stream-compile-s")
		b.ReportMetric(wholeBuild.Seconds(), "whole-build-s")
		b.ReportMetric(wholeCompile.Seconds(), "whole-compile-s")
		b.ReportMetric(streamConcurrent.Seconds(), "stream-concurrent-compile-s")
		b.ReportMetric(streamCompile.Seconds()/wholeCompile.Seconds(), "compile-ratio")
		b.ReportMetric(streamConcurrent.Seconds()/wholeCompile.Seconds(), "concurrent-compile-ratio")
		b.ReportMetric((streamBuild+streamCompile).Seconds()/(wholeBuild+wholeCompile).Seconds(), "build+compile-ratio")
	}
}
