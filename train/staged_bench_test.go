package train_test

import (
	"flag"
	"slices"
	"testing"
	"time"

	"github.com/onegpu/onegpu/data"
	"github.com/onegpu/onegpu/internal/testkit"
	"github.com/onegpu/onegpu/mixed"
	"github.com/onegpu/onegpu/models"
	"github.com/onegpu/onegpu/optim"
	"github.com/onegpu/onegpu/remat"
	"github.com/onegpu/onegpu/train"
)

var (
	stagedPreset = flag.String("staged.preset", "small", "BenchmarkStagedStep: the GPT preset")
	stagedSeq    = flag.Int("staged.seq", 2048, "BenchmarkStagedStep: the sequence length")
	stagedBatch  = flag.Int("staged.batch", 4, "BenchmarkStagedStep: the batch")
	stagedMicro  = flag.Int("staged.microbatches", 2, "BenchmarkStagedStep: the micro-batches")
	stagedPolicy = flag.String("staged.policy", "params=float32,compute=bfloat16,output=float32", "BenchmarkStagedStep: the policy")
	stagedRemat  = flag.String("staged.remat", "block", "BenchmarkStagedStep: the kinds of block rematerialized (none or a list)")
	stagedSteps  = flag.Int("staged.steps", 4, "BenchmarkStagedStep: the timed steps of each mode, alternating")
)

// BenchmarkStagedStep times, on XLA, the staged step (Config.Offload OffloadStaged) against the
// whole step of the same run (a GPT preset at -staged.seq, -staged.batch in -staged.microbatches,
// -staged.policy, -staged.remat, Adam, no dropout): after each has compiled and run one step, they
// alternate -staged.steps steps each, so that both see the same load, and it reports each one's
// median milliseconds per step and their ratio (staged/whole), and the ratio of their median CPU
// times (cpu-staged/whole: the process's, steadier than wall time on a shared machine). With
// remat of whole blocks both recompute each block once; without it the staged step still does
// (its backward program recomputes the block from its kept input), with remat inside the block it
// recomputes twice. E.g.
//
//	go test ./train/ -run XXX -bench StagedStep -benchtime 1x -staged.seq 2048
func BenchmarkStagedStep(b *testing.B) {
	backend := testkit.RequireXLA(b)
	g := models.Presets[*stagedPreset]
	g.SeqLen, g.Dropout = *stagedSeq, 0
	policy, err := mixed.ParsePolicy(*stagedPolicy)
	if err != nil {
		b.Fatal(err)
	}
	kinds, err := remat.ParseKinds(*stagedRemat)
	if err != nil {
		b.Fatal(err)
	}
	config := train.Config{Model: models.GPT{Config: g}, Batch: *stagedBatch, MicroBatches: *stagedMicro, Policy: policy,
		Remat: train.Remat{Kinds: kinds}, Schedule: optim.Constant(1e-3), Seed: 1}
	batches, err := data.NewSyntheticTokens(config.Batch, g.SeqLen, g.Vocab, 3)
	if err != nil {
		b.Fatal(err)
	}
	trainers := map[train.Offload]*train.Trainer{}
	for _, mode := range []train.Offload{train.OffloadNone, train.OffloadStaged} {
		config.Offload = mode
		tr, err := train.New(backend, config)
		if err != nil {
			b.Fatal(err)
		}
		defer tr.Close()
		start := time.Now()
		if _, err := tr.Step(batches.Batch(0)); err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(time.Since(start).Seconds(), mode.String()+"-first-step-s")
		trainers[mode] = tr
	}
	for range b.N {
		times, cpu := map[train.Offload][]float64{}, map[train.Offload][]float64{}
		for i := range *stagedSteps {
			for _, mode := range []train.Offload{train.OffloadNone, train.OffloadStaged} {
				start, startCPU := time.Now(), testkit.CPUTime(b)
				if _, err := trainers[mode].Step(batches.Batch(1 + i)); err != nil {
					b.Fatal(err)
				}
				times[mode] = append(times[mode], 1e3*time.Since(start).Seconds())
				cpu[mode] = append(cpu[mode], (testkit.CPUTime(b) - startCPU).Seconds())
			}
		}
		median := func(xs []float64) float64 {
			xs = slices.Clone(xs)
			slices.Sort(xs)
			return xs[len(xs)/2]
		}
		whole, staged := median(times[train.OffloadNone]), median(times[train.OffloadStaged])
		b.ReportMetric(whole, "whole-ms")
		b.ReportMetric(staged, "staged-ms")
		b.ReportMetric(staged/whole, "staged/whole")
		if wholeCPU := median(cpu[train.OffloadNone]); wholeCPU > 0 {
			b.ReportMetric(median(cpu[train.OffloadStaged])/wholeCPU, "cpu-staged/whole")
		}
	}
}
