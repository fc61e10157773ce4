package accum_test

import (
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/gomlx/gomlx/pkg/ml/context"
	"github.com/gomlx/gomlx/pkg/ml/train/optimizers"

	"github.com/onegpu/onegpu/accum"
	"github.com/onegpu/onegpu/analysis"
	"github.com/onegpu/onegpu/internal/heapmeter"
	"github.com/onegpu/onegpu/internal/tutorialmlp"
)

// BenchmarkMicroBatches compares an Adam train step with 4 micro-batches against the same step with
// 1, on the embedded backend in sequential mode, for the deep MLP of the memory test (batch 16384,
// 6 tanh layers of 128) and the tutorial MLP at batch 4096:
//
//	go test ./accum/ -run '^$' -bench MicroBatches -benchtime 5x
//
// Each iteration runs one step of each, alternately, so that the time ratio comes from one run on
// the same machine state. Reported per k: ms/step; est-MiB, the estimated peak above the step's
// inputs (analysis.Analyze's PeakTempBytes); act-MiB, the activations alive at the estimated peak
// (the input batch, which both hold, included); heap-MiB, the measured Go heap peak above the
// pre-step baseline (heapmeter.MeasurePeak, GOGC=10, lowest of 3 runs, outside the timed loop).
// The *-ratio metrics are k=4 / k=1.
func BenchmarkMicroBatches(b *testing.B) {
	tutorialX, tutorialLabels := tutorialmlp.RandomBatch(1, 4096)
	for _, model := range []struct {
		name   string
		lossFn accum.LossFn
		batch  []*tensors.Tensor
	}{
		{"deep_mlp", deepMLPLoss, deepBatchTensors(1)},
		{"tutorial_mlp_batch_4096", mlpMeanLoss, []*tensors.Tensor{tutorialX, tutorialLabels}},
	} {
		b.Run(model.name, func(b *testing.B) {
			ks := []int{1, 4}
			type variant struct {
				memory  *analysis.Memory
				heap    int64
				elapsed time.Duration
				run     func() error
			}
			variants := map[int]*variant{}
			inputs := make([]shapes.Shape, len(model.batch))
			args := make([]any, len(model.batch))
			for i, t := range model.batch {
				inputs[i], args[i] = t.Shape(), t
			}
			for _, k := range ks {
				step, err := adamStep(optimizers.Adam().Done(), k, model.lossFn)
				if err != nil {
					b.Fatal(err)
				}
				p, err := analysis.ContextProgram(embedded(), context.New(), fmt.Sprintf("step_k%d", k), inputs, step)
				if err != nil {
					b.Fatal(err)
				}
				exec := execStep(b, embedded(), context.New(), step)
				v := &variant{memory: analysis.Analyze(p), run: func() error { _, err := exec.Exec(args...); return err }}
				if err := v.run(); err != nil { // compile and initialize
					b.Fatal(err)
				}
				v.heap, _ = lowestHeapPeak(b, v.run)
				variants[k] = v
			}
			b.ResetTimer()
			for range b.N {
				for _, k := range ks {
					start := time.Now()
					if err := variants[k].run(); err != nil {
						b.Fatal(err)
					}
					variants[k].elapsed += time.Since(start)
				}
			}
			b.StopTimer()
			for _, k := range ks {
				v := variants[k]
				b.ReportMetric(float64(v.elapsed.Milliseconds())/float64(b.N), fmt.Sprintf("k%d-ms/step", k))
				b.ReportMetric(mib(v.memory.PeakTempBytes), fmt.Sprintf("k%d-est-MiB", k))
				b.ReportMetric(mib(v.memory.Breakdown[analysis.Activations]), fmt.Sprintf("k%d-act-MiB", k))
				b.ReportMetric(mib(v.heap), fmt.Sprintf("k%d-heap-MiB", k))
			}
			one, four := variants[1], variants[4]
			b.ReportMetric(float64(four.elapsed)/float64(one.elapsed), "time-ratio")
			b.ReportMetric(float64(four.memory.PeakTempBytes)/float64(one.memory.PeakTempBytes), "est-ratio")
			b.ReportMetric(float64(four.memory.Breakdown[analysis.Activations])/float64(one.memory.Breakdown[analysis.Activations]), "act-ratio")
			b.ReportMetric(float64(four.heap)/float64(one.heap), "heap-ratio")
		})
	}
}

// lowestHeapPeak measures the heap peak above the baseline while run runs (heapmeter.MeasurePeak),
// three times, and returns the lowest and all readings. Sampling errs upwards (buffers freed just
// before the peak may not be collected yet), so the lowest of a few runs is the best reading.
func lowestHeapPeak(t testing.TB, run func() error) (int64, string) {
	lowest := int64(math.MaxInt64)
	var readings []string
	for range 3 {
		h, err := heapmeter.MeasurePeak(run)
		if err != nil {
			t.Fatal(err)
		}
		lowest = min(lowest, h.AboveBaseline())
		readings = append(readings, fmt.Sprintf("%.1f", mib(h.AboveBaseline())))
	}
	return lowest, strings.Join(readings, ", ")
}
