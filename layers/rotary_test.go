package layers_test

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/ml/context"

	"github.com/onegpu/onegpu/internal/plainllama"
	"github.com/onegpu/onegpu/internal/testkit"
	"github.com/onegpu/onegpu/layers"
)

// llama3Rotary has Llama 3's scaling at a small original length, so that head width 16 has
// frequencies in all three bands (kept, interpolated, slowed down).
var llama3Rotary = layers.Rotary{Theta: 10000, Scaling: &layers.RopeScaling{Factor: 4, LowFreqFactor: 1, HighFreqFactor: 4, OriginalMaxPositions: 64}}

// TestRotaryMatchesFloat64: rotary embeddings, with and without Llama 3's scaling, equal the plain
// float64 rotation in the rotate-half layout (feature i turns with feature i + d/2), and their
// gradients follow.
func TestRotaryMatchesFloat64(t *testing.T) {
	for _, tc := range []struct {
		name    string
		rotary  layers.Rotary
		scaling *plainllama.Scaling
	}{
		{"theta 10000", layers.Rotary{Theta: 10000}, nil},
		{"llama3 scaling", llama3Rotary, &plainllama.Scaling{Factor: 4, Low: 1, High: 4, Original: 64}},
	} {
		rng := rand.New(rand.NewPCG(2, 3))
		const batch, seq, heads, headDim = 2, 12, 3, 16
		check := testkit.PlainCheck{
			Inputs: []testkit.Input{testkit.NormalInput(rng, batch, seq, heads, headDim)},
			Build: func(_ *context.Context, compute dtypes.DType, in []*graph.Node) *graph.Node {
				return tc.rotary.Apply(graph.ConvertDType(in[0], compute))
			},
			Plain: func(_ map[string][]float64, in [][]float64) []float64 {
				x := append([]float64(nil), in[0]...)
				plainllama.Rotate(x, batch, seq, heads, headDim, plainllama.Frequencies(tc.rotary.Theta, headDim, tc.scaling))
				return x
			},
		}
		for _, backend := range testkit.All() {
			t.Run(tc.name+"/"+backend.Name(), func(t *testing.T) { check.Run(t, backend) })
		}
	}
}

// TestRotaryFrequencies: the float32 frequencies (transformers' inv_freq, each step rounded to
// float32) are within float32 rounding of the float64 formula, the three bands of Llama 3's
// scaling are all exercised, and a frequency in the middle band is interpolated.
func TestRotaryFrequencies(t *testing.T) {
	const headDim = 16
	f32 := llama3Rotary.InverseFrequencies(headDim, dtypes.Float32)
	f64 := llama3Rotary.InverseFrequencies(headDim, dtypes.Float64)
	plain := plainllama.Frequencies(10000, headDim, &plainllama.Scaling{Factor: 4, Low: 1, High: 4, Original: 64})
	unscaled := plainllama.Frequencies(10000, headDim, nil)
	bands := map[string]int{}
	for i := range plain {
		if math.Abs(f64[i]-plain[i]) > 1e-15*plain[i] || math.Abs(f32[i]-plain[i]) > 1e-6*plain[i] {
			t.Errorf("frequency %d: float32 %g, float64 %g, plain %g", i, f32[i], f64[i], plain[i])
		}
		switch ratio := unscaled[i] / plain[i]; {
		case ratio == 1:
			bands["kept"]++
		case math.Abs(ratio-4) < 1e-12:
			bands["slowed down"]++
		default:
			bands["interpolated"]++
		}
	}
	if len(bands) != 3 {
		t.Errorf("bands %v: the test's scaling should exercise all three", bands)
	}
}

// TestRotaryRefusesWhatCannotWork: odd head widths, a theta that is not above 1 and inverted
// Llama 3 factors are errors naming the setting.
func TestRotaryRefusesWhatCannotWork(t *testing.T) {
	for _, tc := range []struct {
		rotary  layers.Rotary
		headDim int
		want    string
	}{
		{layers.Rotary{Theta: 10000}, 7, "head width 7 must be even"},
		{layers.Rotary{Theta: 0}, 8, "theta = 0"},
		{layers.Rotary{Theta: math.NaN()}, 8, "theta = NaN"},
		{layers.Rotary{Theta: 1e4, Scaling: &layers.RopeScaling{Factor: 8, LowFreqFactor: 4, HighFreqFactor: 1, OriginalMaxPositions: 8192}}, 8, "low_freq_factor < high_freq_factor"},
		{layers.Rotary{Theta: 1e4, Scaling: &layers.RopeScaling{Factor: 0, LowFreqFactor: 1, HighFreqFactor: 4, OriginalMaxPositions: 8192}}, 8, "factor = 0"},
		{layers.Rotary{Theta: 1e4, Scaling: &layers.RopeScaling{Factor: 8, LowFreqFactor: 1, HighFreqFactor: 4}}, 8, "original_max_position_embeddings = 0"},
	} {
		if err := tc.rotary.Validate(tc.headDim); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v.Validate(%d) = %v, want an error containing %q", tc.rotary, tc.headDim, err, tc.want)
		}
	}
}
