package train_test

import (
	"bytes"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/ml/context"

	"github.com/onegpu/onegpu/analysis"
	"github.com/onegpu/onegpu/hf"
	"github.com/onegpu/onegpu/internal/heapmeter"
	"github.com/onegpu/onegpu/internal/testkit"
	"github.com/onegpu/onegpu/layers"
	"github.com/onegpu/onegpu/mixed"
	"github.com/onegpu/onegpu/models"
	"github.com/onegpu/onegpu/optim"
	"github.com/onegpu/onegpu/quant"
	"github.com/onegpu/onegpu/train"
)

// BenchmarkBaseAsLoaded makes the NF4 base of a QLoRA run (bfloat16, every projection targeted)
// from a 107M-parameter Llama checkpoint of random bfloat16 weights (214 MB, written to a
// temporary folder) two ways: "whole", the weights loaded into variables (SetWeights, hf.Open)
// and quantized when the run starts (Initialize), and "as-loaded", each weight hashed and
// quantized as it is read (SetBase, hf.OpenWith's sink) before the next. It reports the Go heap's
// peak above what was live before (peak-heap-MiB, heapmeter: GOGC=10, sampled), the process's
// peak resident memory (peak-rss-MiB, where Linux lets it be reset: it counts the mapped
// checkpoint's pages too, and Go's garbage at GOGC=10), and the bytes the base holds once made
// (base-MiB: the NF4 codes and the bfloat16 embedding, head and norms). Run the two in one
// command; the ratio of their peaks is what loading as it reads saves:
//
//	go test ./train -run XXX -bench BaseAsLoaded -benchtime 1x
func BenchmarkBaseAsLoaded(b *testing.B) {
	c := models.LlamaConfig{Vocab: 8192, Hidden: 1024, Intermediate: 2816, Layers: 8, Heads: 16, KVHeads: 4, HeadDim: 64,
		SeqLen: 64, MaxPositions: 64, RopeTheta: 10000, NormEpsilon: 1e-5}
	model := models.Llama{Config: c}
	layout, err := hf.Describe(model)
	if err != nil {
		b.Fatal(err)
	}
	var specs []testkit.RandomTensor
	for _, spec := range layout.Tensors() {
		specs = append(specs, testkit.RandomTensor{Name: spec.Name, Shape: spec.Shape})
	}
	dir := b.TempDir()
	testkit.WriteRandomHF(b, dir, specs, layout.Config())
	config := train.Config{Model: model, Batch: 1, Policy: mixed.Float32, Schedule: optim.Constant(1e-3), Seed: 1,
		BaseDType: dtypes.BFloat16, LoRA: layers.LoRA{Rank: 16, Alpha: 32,
			Targets: []string{"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"}, Quantize: quant.QLoRA()}}
	for _, way := range []string{"whole", "as-loaded"} {
		b.Run(way, func(b *testing.B) {
			for range b.N {
				tr, err := train.New(testkit.Embedded(), config)
				if err != nil {
					b.Fatal(err)
				}
				resetPeakRSS()
				peak, err := heapmeter.MeasurePeak(func() error {
					if way == "whole" {
						if err := tr.SetWeights(func(ctx *context.Context) error {
							_, err := hf.Open(ctx, dir, dtypes.BFloat16, 0)
							return err
						}); err != nil {
							return err
						}
						return tr.Initialize()
					}
					if err := tr.SetBase("", func(ctx *context.Context, w *train.BaseWeights) error {
						_, err := hf.OpenWith(ctx, dir, hf.Options{DType: dtypes.BFloat16, Sink: w})
						return err
					}); err != nil {
						return err
					}
					return tr.Initialize()
				})
				if err != nil {
					b.Fatal(err)
				}
				b.ReportMetric(float64(peak.AboveBaseline())/(1<<20), "peak-heap-MiB")
				if rss := peakRSS(); rss > 0 {
					b.ReportMetric(float64(rss)/(1<<20), "peak-rss-MiB")
				}
				var held int64
				for v := range tr.Ctx.IterVariables() {
					if analysis.IsWeight(tr.Ctx, v) && !layers.IsAdapter(v) {
						held += int64(v.Shape().Memory())
					}
				}
				b.ReportMetric(float64(held)/(1<<20), "base-MiB")
				b.Logf("%s: base sha256 %s", way, tr.BaseSHA256())
				tr.Close()
			}
		})
	}
}

// resetPeakRSS resets the process's peak resident memory where Linux lets it
// (/proc/self/clear_refs); elsewhere peakRSS then reports 0.
func resetPeakRSS() { _ = os.WriteFile("/proc/self/clear_refs", []byte("5"), 0) }

// peakRSS is the process's peak resident memory in bytes since resetPeakRSS (VmHWM), or 0 where
// /proc/self/status is not there.
func peakRSS() int64 {
	status, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for line := range bytes.Lines(status) {
		if rest, ok := strings.CutPrefix(string(line), "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			if err == nil {
				return kb << 10
			}
		}
	}
	return 0
}
