package testkit

import (
	"testing"
	"time"

	"github.com/onegpu/onegpu/analysis"
)

// ReportCompile compiles p for XLA and reports, as b's metrics, XLA's compile time ("compile-s",
// wall, and "compile-cpu-s", the process's CPU time: steadier on a shared machine), the graph's
// nodes, and XLA's temporary bytes next to onegpu's estimate of them (analysis.Analyze's
// PeakTempBytes), as "xla-"+unit and "est-"+unit in units of unitBytes (1<<20 with "MiB", 1<<30
// with "GiB"). It finalizes p's graph.
func ReportCompile(b *testing.B, p *analysis.Program, unitBytes float64, unit string) {
	b.Helper()
	defer p.Graph.Finalize()
	estimate := analysis.Analyze(p).PeakTempBytes
	start, cpu := time.Now(), CPUTime(b)
	compiled, err := analysis.CompileProgram(p)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(time.Since(start).Seconds(), "compile-s")
	b.ReportMetric((CPUTime(b) - cpu).Seconds(), "compile-cpu-s")
	b.ReportMetric(float64(len(p.Graph.Nodes())), "nodes")
	b.ReportMetric(float64(compiled.TemporaryBytes)/unitBytes, "xla-"+unit)
	b.ReportMetric(float64(estimate)/unitBytes, "est-"+unit)
}
