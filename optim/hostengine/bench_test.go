package hostengine

import (
	"flag"
	"testing"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/dtypes"

	"github.com/onegpu/onegpu/internal/testkit"
	"github.com/onegpu/onegpu/optim"
)

var (
	benchParams = flag.Int64("hostengine.params", 16<<20, "parameters of BenchmarkUpdate's matrix")
	benchArray  = flag.Int64("hostengine.array", 256<<20, "bytes of each of BenchmarkBandwidth's three arrays")
)

// BenchmarkBandwidth reports the host's STREAM copy and triad bandwidth (GB/s) on every core.
//
//	go test ./optim/hostengine -run X -bench Bandwidth
func BenchmarkBandwidth(b *testing.B) {
	for range b.N {
		bw := MeasureBandwidth(*benchArray, 5)
		b.ReportMetric(bw.Copy/1e9, "copy-GB/s")
		b.ReportMetric(bw.Triad/1e9, "triad-GB/s")
	}
}

// BenchmarkUpdate reports each optimizer's host update rate (parameters per second, bf16
// parameters out) by its graph update on the embedded backend and XLA's CPU client and by its flat
// loop, and the fraction of the bound the measured copy bandwidth sets.
//
//	go test ./optim/hostengine -run X -bench Update -benchtime 1x
func BenchmarkUpdate(b *testing.B) {
	bw := MeasureBandwidth(*benchArray, 5)
	b.Logf("triad %.1f GB/s, copy %.1f GB/s (%d threads)", bw.Triad/1e9, bw.Copy/1e9, bw.Threads)
	backendList := map[string]backends.Backend{"go": testkit.Embedded()}
	if x := testkit.XLA(); x != nil {
		backendList["xla"] = x
	}
	for name, backend := range backendList {
		for _, opt := range []string{"adam", "adam8bit", "adafactor"} {
			for _, graphUpdate := range []bool{true, false} {
				o, err := optim.ByName(opt, optim.Settings{})
				if err != nil {
					b.Fatal(err)
				}
				if _, flat := o.(optim.FlatOptimizer); !graphUpdate && (!flat || name != "go") {
					continue // one flat row per optimizer
				}
				path := name
				if !graphUpdate {
					path = "flat"
				}
				b.Run(path+"/"+opt, func(b *testing.B) {
					for range b.N {
						r, err := MeasureUpdate(Config{Backend: backend, Optimizer: o, Compute: dtypes.BFloat16, GraphUpdate: graphUpdate}, *benchParams, 3, max(bw.Copy, bw.Triad))
						if err != nil {
							b.Fatal(err)
						}
						b.ReportMetric(r.ParamsPerSecond/1e6, "Mparams/s")
						b.ReportMetric(r.BoundParamsPerSecond/1e6, "bound-Mparams/s")
						b.ReportMetric(r.Fraction, "of-bound")
						b.ReportMetric(r.BytesPerParam, "B/param")
					}
				})
			}
		}
	}
}
