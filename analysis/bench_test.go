package analysis_test

import (
	"math"
	"testing"

	"github.com/onegpu/onegpu/internal/heapmeter"
)

// BenchmarkHeapPeakVsEstimate sets the Go heap's peak, sampled while the embedded backend runs
// each measured train step (heapmeter.MeasurePeak, GOGC=10, the least of 5 runs: sampling only
// ever reads high), beside the estimated PeakTempBytes. On an idle machine they agree within 10%;
// a loaded one makes the sampler read high (the collector falls behind), which is why the test of
// the simulation counts allocations instead (TestAllocationsMatchSimulation).
//
//	go test ./analysis -run XXX -bench HeapPeakVsEstimate -benchtime 1x
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
