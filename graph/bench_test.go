package graph_test

import (
	"math"
	"testing"
	"time"

	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/ml/context"

	ograph "github.com/onegpu/onegpu/graph"
	"github.com/onegpu/onegpu/internal/heapmeter"
	"github.com/onegpu/onegpu/internal/tutorialmlp"
)

// BenchmarkHeapPeakVsEstimate sets the Go heap's peak, sampled while the embedded backend runs
// each measured train step (heapmeter.MeasurePeak, GOGC=10, the least of 5 runs: sampling only
// ever reads high), beside the estimated PeakTempBytes. On an idle machine they agree within 10%;
// a loaded one makes the sampler read high (the collector falls behind), which is why the test of
// the simulation counts allocations instead (TestAllocationsMatchSimulation).
//
//	go test ./graph -run XXX -bench HeapPeakVsEstimate -benchtime 1x
func BenchmarkHeapPeakVsEstimate(b *testing.B) {
	for _, step := range measuredSteps() {
		b.Run(step.name, func(b *testing.B) {
			m, exec, args := analyzeAndCompile(b, embedded(), step)
			measured := int64(math.MaxInt64)
			b.ResetTimer()
			for range b.N {
				for range 5 {
					h, err := heapmeter.MeasurePeak(func() error { _, err := exec.Exec(args...); return err })
					if err != nil {
						b.Fatal(err)
					}
					measured = min(measured, h.AboveBaseline())
				}
			}
			b.ReportMetric(mib(m.PeakTempBytes), "estimated-MiB")
			b.ReportMetric(mib(measured), "heap-MiB")
			b.ReportMetric(float64(measured)/float64(m.PeakTempBytes), "heap/estimate")
		})
	}
}

// BenchmarkMLPTrainStepGradients times the tutorial MLP's train step (batch 512, Adam) on the
// embedded backend with onegpu's gradient rules and with GoMLX v0.26.0's, interleaved in one loop
// so that the ratios compare like with like on a shared machine. It also reports the estimated
// peak memory of each.
//
//	go test ./graph -run XXX -bench MLPTrainStepGradients -benchtime 10x
func BenchmarkMLPTrainStepGradients(b *testing.B) {
	x, labels := tutorialmlp.RandomBatch(1, tutorialmlp.Batch)
	variants := []struct {
		name  string
		stock bool
	}{{"onegpu", false}, {"stock", true}}
	var elapsed [2]time.Duration
	var peak [2]int64
	var execs [2]*context.Exec
	for i, v := range variants {
		step := measuredSteps()[0]
		step.inputs[0], step.inputs[1] = x, labels
		fn := func(ctx *context.Context, in []*graph.Node) []*graph.Node {
			if v.stock {
				ograph.UseStockGradients(in[0].Graph())
			}
			return step.fn(ctx, in)
		}
		p, err := ograph.ContextProgram(embedded(), context.New(), v.name, step.shapes(), fn)
		if err != nil {
			b.Fatal(err)
		}
		peak[i] = ograph.Analyze(p).PeakBytes
		p.Graph.Finalize()
		execs[i], err = context.NewExec(embedded(), context.New(), fn)
		if err != nil {
			b.Fatal(err)
		}
		defer execs[i].Finalize()
		if _, err := execs[i].Exec(x, labels); err != nil { // compile
			b.Fatal(err)
		}
	}
	b.ResetTimer()
	for range b.N {
		for i := range variants {
			start := time.Now()
			if _, err := execs[i].Exec(x, labels); err != nil {
				b.Fatal(err)
			}
			elapsed[i] += time.Since(start)
		}
	}
	for i, v := range variants {
		b.ReportMetric(elapsed[i].Seconds()*1000/float64(b.N), v.name+"-ms/step")
		b.ReportMetric(float64(peak[i])/(1<<20), v.name+"-peak-MiB")
	}
	b.ReportMetric(float64(elapsed[1])/float64(elapsed[0]), "stock/onegpu-time")
	b.ReportMetric(float64(peak[1])/float64(peak[0]), "stock/onegpu-peak")
}
