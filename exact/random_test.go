package exact_test

import (
	"math"
	"sort"
	"testing"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/gomlx/gomlx/pkg/core/tensors"

	"github.com/onegpu/onegpu/exact"
	"github.com/onegpu/onegpu/internal/testkit"
)

// TestRandomBitsAreSplitMix64: the stream with key 1234567 is SplitMix64 seeded with 1234567, the
// published sequence of its reference implementation (prng.di.unimi.it/splitmix64.c), on every
// backend.
func TestRandomBitsAreSplitMix64(t *testing.T) {
	want := []uint64{6457827717110365317, 3203168211198807973, 9817491932198370423, 4593380528125082431, 16408922859458223821}
	for _, backend := range testkit.All() {
		out := testkit.Execute(t, backend, func(in []*graph.Node) []*graph.Node {
			return []*graph.Node{exact.RandomBits(in[0].Graph(), 1234567, 5)}
		}, tensors.FromValue([]float32{0}))[0]
		got := out.Value().([]uint64)
		for i := range want {
			if got[i] != want[i] {
				t.Fatalf("%s: element %d is %d, SplitMix64's is %d", backend.Name(), i, got[i], want[i])
			}
		}
	}
}

// normalSamples returns RandomNormal's values for key on backend, as float64.
func normalSamples(t *testing.T, key uint64, shape shapes.Shape, std float64) []float64 {
	t.Helper()
	return testkit.Run(t, testkit.Embedded(), func(in []*graph.Node) []*graph.Node {
		return []*graph.Node{exact.RandomNormal(in[0].Graph(), key, shape, std)}
	}, tensors.FromValue([]float32{0}))[0]
}

// TestRandomNormalSameBitsOnEveryBackend: float32, float64 and bfloat16 values (the last rounded
// by RandomNormal itself: the embedded backend converts to bfloat16 by truncation, XLA rounds) are
// bit-identical on the embedded backend and on XLA.
func TestRandomNormalSameBitsOnEveryBackend(t *testing.T) {
	xla := testkit.RequireXLA(t)
	for _, shape := range []shapes.Shape{shapes.Make(dtypes.Float32, 64, 300), shapes.Make(dtypes.Float64, 5000), shapes.Make(dtypes.BFloat16, 20000)} {
		fn := func(in []*graph.Node) []*graph.Node {
			return []*graph.Node{exact.RandomNormal(in[0].Graph(), 99, shape, 0.02)}
		}
		want := testkit.Execute(t, testkit.Embedded(), fn, tensors.FromValue([]float32{0}))
		got := testkit.Execute(t, xla, fn, tensors.FromValue([]float32{0}))
		testkit.AssertBitIdentical(t, got, want)
	}
}

// TestRandomNormalIsNormal: 2^17 values with std 0.5 have mean 0 and std 0.5 within sampling
// error (4 standard errors), their empirical distribution is within the 1% Kolmogorov-Smirnov
// bound of the normal's, and the fractions beyond 1, 2 and 3 standard deviations are the
// normal's within 4 binomial standard errors.
func TestRandomNormalIsNormal(t *testing.T) {
	const n, std = 1 << 17, 0.5
	xs := normalSamples(t, exact.RandomKey(42, "test/kernel", []int{n}), shapes.Make(dtypes.Float64, n), std)
	var sum, sumSq float64
	for _, x := range xs {
		sum += x
		sumSq += x * x
	}
	mean := sum / n
	sd := math.Sqrt(sumSq/n - mean*mean)
	if math.Abs(mean) > 4*std/math.Sqrt(n) || math.Abs(sd-std) > 4*std/math.Sqrt(2*n) {
		t.Errorf("mean %.5f, std %.5f: want 0 and %g within sampling error", mean, sd, std)
	}
	sort.Float64s(xs)
	var ks float64
	for i, x := range xs {
		cdf := 0.5 * math.Erfc(-x/std/math.Sqrt2)
		ks = max(ks, math.Abs(cdf-float64(i)/n), math.Abs(cdf-float64(i+1)/n))
	}
	if ks > 1.63/math.Sqrt(n) {
		t.Errorf("Kolmogorov-Smirnov distance %.5f above the 1%% bound %.5f", ks, 1.63/math.Sqrt(n))
	}
	for _, k := range []float64{1, 2, 3} {
		beyond := 0
		for _, x := range xs {
			if math.Abs(x) > k*std {
				beyond++
			}
		}
		p := math.Erfc(k / math.Sqrt2)
		if got := float64(beyond) / n; math.Abs(got-p) > 4*math.Sqrt(p*(1-p)/n) {
			t.Errorf("%.5f of the values beyond %g std, the normal has %.5f", got, k, p)
		}
	}
	t.Logf("mean %.2e, std %.5f, KS %.5f, min %.3f, max %.3f", mean, sd, ks, xs[0], xs[n-1])
}

// TestRandomKeysAreIndependent: streams whose seed, name or shape differ are uncorrelated (within
// 4/√n) and the same key gives the same stream.
func TestRandomKeysAreIndependent(t *testing.T) {
	const n = 1 << 14
	shape := shapes.Make(dtypes.Float32, n)
	base := normalSamples(t, exact.RandomKey(1, "a/kernel", []int{n}), shape, 1)
	again := normalSamples(t, exact.RandomKey(1, "a/kernel", []int{n}), shape, 1)
	for i := range base {
		if base[i] != again[i] {
			t.Fatalf("the same key gave %v and %v at %d", base[i], again[i], i)
		}
	}
	for name, key := range map[string]uint64{
		"seed":  exact.RandomKey(2, "a/kernel", []int{n}),
		"name":  exact.RandomKey(1, "b/kernel", []int{n}),
		"shape": exact.RandomKey(1, "a/kernel", []int{n, 1}),
	} {
		other := normalSamples(t, key, shape, 1)
		var dot, a2, b2 float64
		for i := range base {
			dot += base[i] * other[i]
			a2 += base[i] * base[i]
			b2 += other[i] * other[i]
		}
		if corr := dot / math.Sqrt(a2*b2); math.Abs(corr) > 4/math.Sqrt(n) {
			t.Errorf("another %s: correlation %.4f with the first stream", name, corr)
		}
	}
}
