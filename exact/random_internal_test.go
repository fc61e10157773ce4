package exact

import (
	"github.com/gomlx/gomlx/backends/simplego"
	"math"
	"math/bits"
	"testing"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/shapes"
)

// hostNormal is RandomNormal's float64 value for element i of the stream key, computed on the host
// with Go's integers: the plain version the graph is checked against.
func hostNormal(key uint64, i int, std float64) float64 {
	z := mix64(key + uint64(i+1)*splitMixGamma)
	tail := z&(1<<63-1) + 1
	zeros := bits.LeadingZeros64(tail)
	normalized := tail << zeros
	bin := normalized>>(63-normalBinBits) - normalBins
	frac := normalized >> (63 - normalBinBits - normalFracBits) & (1<<normalFracBits - 1)
	j := min(zeros, normalLevels-1)*normalBins + int(bin)
	table := normalTable()
	x := (float64(table.quantiles[j]) + float64(table.slopes[j])*math.Ldexp(float64(frac), -normalFracBits)) * std
	if z>>63 == 1 {
		return -x
	}
	return x
}

// TestRandomNormalMatchesHost: the graph computes exactly the host's values, element by element.
func TestRandomNormalMatchesHost(t *testing.T) {
	const n, key, std = 4096, 77, 0.3
	backend, err := simplego.New("ops_sequential") // the embedded backend (package platform imports this one)
	if err != nil {
		t.Fatal(err)
	}
	defer backend.Finalize()
	exec, err := graph.NewExec(backend, func(g *graph.Graph) *graph.Node {
		return RandomNormal(g, key, shapes.Make(dtypes.Float64, n), std)
	})
	if err != nil {
		t.Fatal(err)
	}
	defer exec.Finalize()
	got := exec.MustExec()[0].Value().([]float64)
	for i := range n {
		if want := hostNormal(key, i, std); math.Float64bits(got[i]) != math.Float64bits(want) {
			t.Fatalf("element %d: %.17g in the graph, %.17g on the host", i, got[i], want)
		}
	}
}

// TestQuantileTable: halfNormalQuantile inverts erfc to 1e-13 from the center to the table's
// deepest octave (2^-41), with known points (P(|Z| > 1, 2, 3)); the table's interpolation is
// within 1e-6 of the exact quantile at every bin's midpoint (the largest error: 8.4e-7, in the
// deepest octaves).
func TestQuantileTable(t *testing.T) {
	for x, tail := range map[float64]float64{1: 0.31731050786291415, 2: 0.04550026389635842, 3: 0.0026997960632601866} {
		if got := halfNormalQuantile(tail); math.Abs(got-x) > 1e-13 {
			t.Errorf("quantile of tail %g: %.15f, want %g", tail, got, x)
		}
	}
	table := normalTable()
	for c := 1; c < normalLevels; c++ {
		for b := range normalBins {
			tail := math.Ldexp(1+(float64(b)+0.5)/normalBins, -c)
			x := halfNormalQuantile(tail)
			if back := math.Erfc(x / math.Sqrt2); math.Abs(back-tail) > 1e-13*tail {
				t.Fatalf("quantile %v of tail %g gives back %g", x, tail, back)
			}
			j := c*normalBins + b
			if interpolated := float64(table.quantiles[j]) + 0.5*float64(table.slopes[j]); math.Abs(interpolated-x) > 1e-6 {
				t.Fatalf("octave %d bin %d: the table gives %.9f at the midpoint, the quantile is %.9f", c, b, interpolated, x)
			}
		}
	}
}
