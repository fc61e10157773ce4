package layers

import (
	"fmt"
	"math"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/shapes"

	"github.com/onegpu/onegpu/vjp"
)

// RopeScaling is Llama 3's frequency scaling of rotary embeddings (Hugging Face's rope_type
// "llama3"): wavelengths shorter than OriginalMaxPositions/HighFreqFactor keep their frequency,
// those longer than OriginalMaxPositions/LowFreqFactor are slowed down by Factor, and those in
// between are interpolated smoothly, so that a model trained at OriginalMaxPositions tokens reads
// longer sequences.
type RopeScaling struct {
	Factor               float64 // factor: how much the low frequencies are slowed down (> 0)
	LowFreqFactor        float64 // low_freq_factor (> 0)
	HighFreqFactor       float64 // high_freq_factor (> LowFreqFactor)
	OriginalMaxPositions int     // original_max_position_embeddings (> 0)
}

// Rotary is the rotary position embedding (RoPE) of Llama-class models in Hugging Face's
// rotate-half layout: within a head of width d, feature i < d/2 is rotated together with feature
// i + d/2 by the angle position·f_i, with frequencies f_i = Theta^(-2i/d), rescaled by Scaling
// when it is set. Published weights (q_proj, k_proj rows head-major, halves paired) load without
// permutation.
type Rotary struct {
	Theta   float64      // rope_theta, the base of the frequencies (> 1), e.g. 10000 or 500000
	Scaling *RopeScaling // nil: none; Llama 3's frequency scaling otherwise
}

// Validate returns an error naming the setting that cannot work for heads of width headDim.
func (r Rotary) Validate(headDim int) error {
	if headDim < 2 || headDim%2 != 0 {
		return fmt.Errorf("rotary embeddings: head width %d must be even (feature i rotates with feature i + width/2)", headDim)
	}
	if !(r.Theta > 1) || math.IsInf(r.Theta, 0) {
		return fmt.Errorf("rotary embeddings: theta = %g must be a finite number above 1 (e.g. 10000)", r.Theta)
	}
	if s := r.Scaling; s != nil {
		switch {
		case !(s.Factor > 0) || math.IsInf(s.Factor, 0):
			return fmt.Errorf("rotary embeddings: llama3 scaling factor = %g must be a finite number above 0", s.Factor)
		case !(s.LowFreqFactor > 0) || !(s.HighFreqFactor > s.LowFreqFactor) || math.IsInf(s.HighFreqFactor, 0):
			return fmt.Errorf("rotary embeddings: llama3 scaling needs 0 < low_freq_factor < high_freq_factor, got %g and %g",
				s.LowFreqFactor, s.HighFreqFactor)
		case s.OriginalMaxPositions < 1:
			return fmt.Errorf("rotary embeddings: llama3 scaling original_max_position_embeddings = %d must be at least 1", s.OriginalMaxPositions)
		}
	}
	return nil
}

// InverseFrequencies returns the headDim/2 frequencies f_i (radians per position), computed step by
// step in float32 as transformers computes its inv_freq (the exponent, the power, the inverse and
// Llama 3's scaling each rounded to float32), or in float64 when dtype is float64. It panics when
// Validate fails.
func (r Rotary) InverseFrequencies(headDim int, dtype dtypes.DType) []float64 {
	if err := r.Validate(headDim); err != nil {
		panic("layers.Rotary: " + err.Error())
	}
	if dtype == dtypes.Float64 {
		return inverseFrequencies[float64](r, headDim)
	}
	f32 := inverseFrequencies[float32](r, headDim)
	out := make([]float64, len(f32))
	for i, f := range f32 {
		out[i] = float64(f)
	}
	return out
}

// inverseFrequencies follows transformers' _compute_default_rope_parameters and
// _compute_llama3_parameters, each operation rounded to T.
func inverseFrequencies[T float32 | float64](r Rotary, headDim int) []T {
	freqs := make([]T, headDim/2)
	for i := range freqs {
		exponent := T(2*i) / T(headDim)
		freqs[i] = 1 / T(math.Pow(float64(T(r.Theta)), float64(exponent)))
	}
	s := r.Scaling
	if s == nil {
		return freqs
	}
	factor, low, span, original := T(s.Factor), T(s.LowFreqFactor), T(s.HighFreqFactor-s.LowFreqFactor), T(s.OriginalMaxPositions)
	lowFreqWavelen, highFreqWavelen := T(float64(s.OriginalMaxPositions)/s.LowFreqFactor), T(float64(s.OriginalMaxPositions)/s.HighFreqFactor)
	for i, f := range freqs {
		wavelen := T(2*math.Pi) / f
		scaled := f
		if wavelen > lowFreqWavelen {
			scaled = f / factor
		}
		if !(wavelen < highFreqWavelen) && !(wavelen > lowFreqWavelen) {
			smooth := (original/wavelen - low) / span
			scaled = (1-smooth)*scaled/factor + smooth*scaled
		}
		freqs[i] = scaled
	}
	return freqs
}

// Apply rotates x [batch, sequence, heads, headDim] (queries or keys, any float dtype) by the
// angles of positions 0, 1, ..., sequence-1: x·cos + rotate_half(x)·sin, as Hugging Face's
// apply_rotary_pos_emb. The angles and their cosines and sines are computed in float32 (float64 for
// float64 x) and cast to x's dtype before they multiply x, as transformers does. The gradient needs
// no saved value: it is the inverse rotation of the cotangent.
func (r Rotary) Apply(x *graph.Node) *graph.Node { return r.ApplyAt(x, nil) }

// ApplyAt is Apply at the given positions, integers [batch, sequence] (Documents.Positions: each
// token's position within its document, as transformers' position_ids); nil positions are 0, 1,
// ..., sequence-1 in every row.
func (r Rotary) ApplyAt(x, positions *graph.Node) *graph.Node {
	if x.Rank() != 4 {
		panic(fmt.Sprintf("layers.Rotary.Apply: x must be [batch, sequence, heads, headDim], got %s", x.Shape()))
	}
	Documents{Positions: positions}.check("layers.Rotary.ApplyAt", x)
	g := x.Graph()
	batch, seq, headDim := x.Shape().Dim(0), x.Shape().Dim(1), x.Shape().Dim(3)
	wide := dtypes.Float32
	if x.DType() == dtypes.Float64 {
		wide = dtypes.Float64
	}
	freqs := graph.ConvertDType(graph.Const(g, r.InverseFrequencies(headDim, wide)), wide) // exact: values are of dtype wide
	rows := 1
	var at *graph.Node
	if positions == nil {
		at = graph.ConvertDType(graph.Iota(g, shapes.Make(dtypes.Int32, 1, seq), 1), wide)
	} else {
		rows, at = batch, graph.ConvertDType(positions, wide)
	}
	// [rows, seq, headDim/2]: one product a value, as transformers' inv_freq @ position_ids.
	angles := graph.Mul(graph.InsertAxes(at, -1), graph.Reshape(freqs, 1, 1, headDim/2))
	// [rows, seq, 1, headDim/2], in x's dtype.
	cos := graph.Reshape(graph.ConvertDType(graph.Cos(angles), x.DType()), rows, seq, 1, headDim/2)
	sin := graph.Reshape(graph.ConvertDType(graph.Sin(angles), x.DType()), rows, seq, 1, headDim/2)
	halves := vjp.SplitAxis(x, -1, 2)
	first, second := halves[0], halves[1]
	// HF: x·[cos, cos] + [-second, first]·[sin, sin]; a + (-b) and a - b are the same bits.
	return graph.Concatenate([]*graph.Node{
		graph.Sub(graph.Mul(first, cos), graph.Mul(second, sin)),
		graph.Add(graph.Mul(second, cos), graph.Mul(first, sin)),
	}, -1)
}
