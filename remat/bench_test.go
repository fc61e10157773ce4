package remat_test

import (
	"flag"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/gomlx/gomlx/pkg/ml/context"

	"github.com/onegpu/onegpu/analysis"
	"github.com/onegpu/onegpu/internal/blocks"
	"github.com/onegpu/onegpu/internal/heapmeter"
	"github.com/onegpu/onegpu/internal/testkit"
	"github.com/onegpu/onegpu/remat"
)

var benchDefault = flag.Bool("remat.default", false,
	"BenchmarkRematVsNone: use blocks.Default() (width 256, 4x slower) instead of the memory tests' 12-block stack")

// BenchmarkRematVsNone runs gradient steps of a 12-block stack (the memory tests' stack12, or
// blocks.Default() with -remat.default) on the embedded backend in sequential mode: without
// checkpoints, with both sublayers checkpointed ("mlp,attn") and with whole blocks checkpointed
// ("block"), in rounds of one step each, so that ratios compare steps run under the same load:
//
//	go test -run '^$' -bench RematVsNone -benchtime 5x ./remat/ [-args -remat.default]
//
// Metrics: s/step of each variant (mean); time-x, the median over rounds of the step time relative
// to none's in the same round (target <= 1.4); cpu-x, the same for the process's CPU time (user +
// system), steadier than wall time on a shared machine; act-x, the activation bytes at the estimated peak
// relative to none's (target <= 0.35); est-MiB and heap-MiB, the estimated and measured (least of
// 3 runs, GOGC=10) peak above the step's inputs. ns/op is one round of three steps.
func BenchmarkRematVsNone(b *testing.B) {
	c := stack12
	if *benchDefault {
		c = blocks.Default()
	}
	x := blocks.RandomInput(c, 1)
	type variant struct {
		spec     string
		exec     *context.Exec
		memory   *analysis.Memory
		elapsed  time.Duration
		rounds   []time.Duration
		cpu      []time.Duration
		measured int64
	}
	var variants []*variant
	for _, spec := range []string{"none", "mlp,attn", "block"} {
		s, _ := blocks.ParseSpec(spec)
		a, err := blocks.Analyze(embedded(), c, s, remat.Config{})
		if err != nil {
			b.Fatal(err)
		}
		exec, err := context.NewExec(embedded(), context.New(), blocks.GradientStep(c, s, remat.Config{}))
		if err != nil {
			b.Fatal(err)
		}
		defer exec.Finalize()
		step(b, exec, x) // compiles and initializes the variables
		variants = append(variants, &variant{spec: spec, exec: exec, memory: a.Memory})
	}
	b.ResetTimer()
	for range b.N {
		for _, v := range variants {
			start, startCPU := time.Now(), testkit.CPUTime(b)
			step(b, v.exec, x)
			v.cpu = append(v.cpu, testkit.CPUTime(b)-startCPU)
			v.rounds = append(v.rounds, time.Since(start))
			v.elapsed += v.rounds[len(v.rounds)-1]
		}
	}
	b.StopTimer()
	for _, v := range variants {
		v.measured = 1 << 62
		for range 3 {
			h, err := heapmeter.MeasurePeak(func() error { _, err := v.exec.Exec(x); return err })
			if err != nil {
				b.Fatal(err)
			}
			v.measured = min(v.measured, h.AboveBaseline())
		}
	}
	none := variants[0]
	for _, v := range variants {
		b.ReportMetric(v.elapsed.Seconds()/float64(b.N), "s/step("+v.spec+")")
		b.ReportMetric(mib(v.memory.PeakTempBytes), "est-MiB("+v.spec+")")
		b.ReportMetric(mib(v.measured), "heap-MiB("+v.spec+")")
		if v != none {
			b.ReportMetric(medianRatio(v.rounds, none.rounds), "time-x("+v.spec+")")
			b.ReportMetric(medianRatio(v.cpu, none.cpu), "cpu-x("+v.spec+")")
			b.ReportMetric(float64(v.memory.Breakdown[analysis.Activations])/float64(none.memory.Breakdown[analysis.Activations]), "act-x("+v.spec+")")
		}
		b.Logf("%-8s %.2f s/step, estimated peak %.1f MiB (activations %.1f MiB), measured %.1f MiB, %.2f GFLOP",
			v.spec, v.elapsed.Seconds()/float64(b.N), mib(v.memory.PeakTempBytes), mib(v.memory.Breakdown[analysis.Activations]),
			mib(v.measured), float64(v.memory.FLOPs)/1e9)
	}
}

// medianRatio returns the median over rounds of a[i]/b[i].
func medianRatio(a, b []time.Duration) float64 {
	ratios := make([]float64, len(a))
	for i := range ratios {
		ratios[i] = float64(a[i]) / float64(b[i])
	}
	slices.Sort(ratios)
	return ratios[len(ratios)/2]
}

func step(b *testing.B, exec *context.Exec, x *tensors.Tensor) {
	outs, err := exec.Exec(x)
	if err != nil {
		b.Fatal(fmt.Errorf("step: %w", err))
	}
	for _, o := range outs {
		o.FinalizeAll()
	}
}
