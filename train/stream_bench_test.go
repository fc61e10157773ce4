package train_test

import (
	"flag"
	"testing"
	"time"

	"github.com/onegpu/onegpu/analysis"
	"github.com/onegpu/onegpu/data"
	"github.com/onegpu/onegpu/internal/testkit"
	"github.com/onegpu/onegpu/layers"
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
	streamAttn   = flag.String("stream.attention", "plain", "BenchmarkStreamedCompile: the attention (plain, chunked[=BLOCK])")
	streamLoss   = flag.String("stream.loss", "plain", "BenchmarkStreamedCompile: the cross-entropy (plain, chunked[=CHUNK])")
	streamWhole  = flag.Bool("stream.whole", true, "BenchmarkStreamedCompile: compile the whole step too (false: the streamed and staged programs only)")
)

// BenchmarkStreamedCompile builds and compiles, on XLA, a Llama preset's whole train step
// (Trainer.Program) and its streamed step's programs (Trainer.StreamedPrograms: the embedding, one
// block, the head), micro-batches of one sequence, bfloat16 compute, remat of whole blocks, and
// reports each one's building and XLA compile seconds and their ratio. The streamed programs
// compile one after the other, as the executor compiles them (compile-ratio), and again at once
// (analysis.CompilePrograms: concurrent-compile-ratio); the staged step compiles them and its
// update programs on the device (Trainer.StagedPrograms: staged-compile-ratio); compile-cpu-ratio
// and staged-compile-cpu-ratio are the same ratios of the process's CPU time, steadier on a shared
// machine where seconds of wall time sample the others' load. The streamed and staged programs do
// not grow with the layers; the whole step unrolls them all. -stream.attention and -stream.loss
// chunk the attention and the loss (reference/jax/chunked_compile.py compiles JAX's hand-chunked
// step of the same shapes); -stream.whole=false leaves the whole step out. E.g.
//
//	go test ./train/ -run XXX -bench StreamedCompile -benchtime 1x -stream.preset llama-3.2-1b
//	go test ./train/ -run XXX -bench StreamedCompile -benchtime 1x -timeout 2h -stream.preset llama-3.2-1b \
//		-stream.seq 8192 -stream.attention chunked -stream.loss chunked
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
	attention, err := layers.ParseAttention(*streamAttn)
	if err != nil {
		b.Fatal(err)
	}
	loss, err := layers.ParseCrossEntropy(*streamLoss)
	if err != nil {
		b.Fatal(err)
	}
	config := train.Config{Model: llama, Batch: *streamMicro, MicroBatches: *streamMicro, Policy: policy, Remat: train.Remat{Kinds: kinds}, Offload: train.OffloadParams,
		Schedule: optim.Constant(1e-3), Attention: attention, CrossEntropy: loss}
	tr, err := train.New(backend, config)
	if err != nil {
		b.Fatal(err)
	}
	for range b.N {
		start := time.Now()
		staged, err := tr.StagedPrograms()
		if err != nil {
			b.Fatal(err)
		}
		streamBuild := time.Since(start)
		// compile compiles ps one after the other: wall time and the process's CPU time (steadier
		// on a shared machine, where a few seconds of wall time sample the others' load).
		compile := func(ps []*analysis.Program) (wall, cpu time.Duration) {
			start, startCPU := time.Now(), testkit.CPUTime(b)
			for _, p := range ps {
				one := time.Now()
				if _, err := analysis.CompileProgram(p); err != nil {
					b.Fatal(err)
				}
				b.ReportMetric(time.Since(one).Seconds(), p.Graph.Name()+"-s")
			}
			return time.Since(start), testkit.CPUTime(b) - startCPU
		}
		nodes := 0
		for _, p := range staged.All() {
			nodes += len(p.Graph.Nodes())
		}
		b.ReportMetric(float64(nodes), "staged-nodes")
		streamCompile, streamCPU := compile(staged.StreamedPrograms.All())
		updateCompile, updateCPU := compile(staged.Updates)
		staged.Finalize()
		streamed, err := tr.StreamedPrograms()
		if err != nil {
			b.Fatal(err)
		}
		start = time.Now()
		if _, err := analysis.CompilePrograms(streamed.All()...); err != nil {
			b.Fatal(err)
		}
		streamConcurrent := time.Since(start)
		streamed.Finalize()
		b.ReportMetric(streamBuild.Seconds(), "stream-build-s")
		b.ReportMetric(streamCompile.Seconds(), "stream-compile-s")
		b.ReportMetric(streamConcurrent.Seconds(), "stream-concurrent-compile-s")
		b.ReportMetric(updateCompile.Seconds(), "staged-update-compile-s")
		if !*streamWhole {
			continue
		}

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
		b.ReportMetric(float64(len(p.Graph.Nodes())), "whole-nodes")
		wholeCompile, wholeCPU := compile([]*analysis.Program{p})
		p.Graph.Finalize()
		config.Offload = train.OffloadParams
		b.ReportMetric(wholeBuild.Seconds(), "whole-build-s")
		b.ReportMetric(wholeCompile.Seconds(), "whole-compile-s")
		b.ReportMetric(streamCompile.Seconds()/wholeCompile.Seconds(), "compile-ratio")
		b.ReportMetric((streamCompile+updateCompile).Seconds()/wholeCompile.Seconds(), "staged-compile-ratio")
		if wholeCPU > 0 {
			b.ReportMetric(streamCPU.Seconds()/wholeCPU.Seconds(), "compile-cpu-ratio")
			b.ReportMetric((streamCPU+updateCPU).Seconds()/wholeCPU.Seconds(), "staged-compile-cpu-ratio")
		}
		b.ReportMetric(streamConcurrent.Seconds()/wholeCompile.Seconds(), "concurrent-compile-ratio")
		b.ReportMetric((streamBuild+streamCompile).Seconds()/(wholeBuild+wholeCompile).Seconds(), "build+compile-ratio")
	}
}

var (
	overlapLayers    = flag.Int("overlap.layers", 24, "BenchmarkStreamedOverlap: the small GPT's layers")
	overlapSeq       = flag.Int("overlap.seq", 16, "BenchmarkStreamedOverlap: the sequence length")
	overlapBatch     = flag.Int("overlap.batch", 2, "BenchmarkStreamedOverlap: sequences per step")
	overlapOptimizer = flag.String("overlap.optimizer", "adam", "BenchmarkStreamedOverlap: the optimizer (optim.ByName)")
	overlapPolicy    = flag.String("overlap.policy", "float32", "BenchmarkStreamedOverlap: the precision policy (mixed.ParsePolicy)")
	overlapClip      = flag.Float64("overlap.clip", 0, "BenchmarkStreamedOverlap: the global-norm clip (0: none)")
	overlapSteps     = flag.Int("overlap.steps", 6, "BenchmarkStreamedOverlap: steps per run (the first, which compiles, is not counted)")
	overlapRounds    = flag.Int("overlap.rounds", 2, "BenchmarkStreamedOverlap: runs of each kind, alternated")
)

// BenchmarkStreamedOverlap trains the small GPT (hidden 256, vocabulary 256) streamed on XLA, deep
// and with few tokens a step so that the host update is a fair share of the step, with the host
// update overlapped (the default) and serialized (Config.SerialHostUpdate), alternated in the same
// run, and reports for each the step time, the device's, the bus's and the host update's (means of
// every step but the first) and the step over its longest part (StreamStats.OverlapRatio); and the
// overlapped step over the serialized one. E.g.
//
//	go test ./train/ -run XXX -bench StreamedOverlap -benchtime 1x -overlap.layers 24
func BenchmarkStreamedOverlap(b *testing.B) {
	backend := testkit.RequireXLA(b)
	gpt := models.Presets["small"]
	gpt.Layers, gpt.SeqLen, gpt.Dropout = *overlapLayers, *overlapSeq, 0
	policy, err := mixed.ParsePolicy(*overlapPolicy)
	if err != nil {
		b.Fatal(err)
	}
	opt, err := optim.ByName(*overlapOptimizer, optim.Settings{})
	if err != nil {
		b.Fatal(err)
	}
	config := train.Config{Model: models.GPT{Config: gpt}, Batch: *overlapBatch, Policy: policy, Optimizer: opt, ClipNorm: *overlapClip,
		Offload: train.OffloadParams, Schedule: optim.Constant(1e-3), Seed: 1}
	batches, err := data.NewSyntheticTokens(config.Batch, gpt.SeqLen, gpt.Vocab, 3)
	if err != nil {
		b.Fatal(err)
	}
	b.Logf("%d parameters, %d tokens a step, %s", gpt.Params(), config.Batch*gpt.SeqLen, opt)
	for range b.N {
		sums := map[bool]train.StreamStats{}
		for range *overlapRounds {
			for _, serial := range []bool{false, true} {
				config.SerialHostUpdate = serial
				tr, err := train.New(backend, config)
				if err != nil {
					b.Fatal(err)
				}
				h, err := tr.Run(batches, train.RunOptions{Steps: *overlapSteps})
				tr.Close()
				if err != nil {
					b.Fatal(err)
				}
				s, sum := h.Offload.(*train.StreamStats), sums[serial]
				sum.StepSeconds += s.StepSeconds / float64(*overlapRounds)
				sum.DeviceSeconds += s.DeviceSeconds / float64(*overlapRounds)
				sum.UploadSeconds += s.UploadSeconds / float64(*overlapRounds)
				sum.DownloadSeconds += s.DownloadSeconds / float64(*overlapRounds)
				sum.HostSeconds += s.HostSeconds / float64(*overlapRounds)
				sum.HostWaitSeconds += s.HostWaitSeconds / float64(*overlapRounds)
				sums[serial] = sum
				b.Logf("serial %v: step %.1f ms, device %.1f, bus %.1f, host %.1f (waited %.1f): %.2fx the longest", serial, 1e3*s.StepSeconds,
					1e3*s.DeviceSeconds, 1e3*s.BusSeconds(), 1e3*s.HostSeconds, 1e3*s.HostWaitSeconds, s.OverlapRatio)
			}
		}
		for serial, name := range map[bool]string{false: "overlapped", true: "serialized"} {
			s := sums[serial]
			longest := max(s.DeviceSeconds, s.BusSeconds(), s.HostSeconds)
			b.ReportMetric(1e3*s.StepSeconds, name+"-step-ms")
			b.ReportMetric(1e3*s.DeviceSeconds, name+"-device-ms")
			b.ReportMetric(1e3*s.BusSeconds(), name+"-bus-ms")
			b.ReportMetric(1e3*s.HostSeconds, name+"-host-ms")
			b.ReportMetric(s.StepSeconds/longest, name+"-step/longest")
		}
		b.ReportMetric(sums[false].StepSeconds/sums[true].StepSeconds, "overlapped/serialized")
	}
}
