// Package plainllama is a plain float64 Llama written with loops over slices, independent of
// GoMLX: the reference that onegpu's Llama layers (RMSNorm, rotary embeddings, SwiGLU,
// grouped-query attention) and models.Llama are tested against. It favours obviousness over speed
// and follows Hugging Face's LlamaForCausalLM: weights [out, in], rotate-half rotary embeddings,
// keys and values repeated per query head (repeat_kv), causal softmax attention.
package plainllama

import (
	"math"
	"strconv"
)

// Linear returns x·wᵀ for x [rows, in] and w [out, in] (flat, row-major): [rows, out].
func Linear(x, w []float64, in, out int) []float64 {
	rows := len(x) / in
	y := make([]float64, rows*out)
	for r := range rows {
		for o := range out {
			s := 0.0
			for i := range in {
				s += x[r*in+i] * w[o*in+i]
			}
			y[r*out+o] = s
		}
	}
	return y
}

// AddBias adds b [out] to every row of y [rows, out] in place (nil b: nothing), and returns y.
func AddBias(y, b []float64) []float64 {
	for r := 0; b != nil && r < len(y); r += len(b) {
		add(y[r:r+len(b)], b)
	}
	return y
}

// RMSNorm returns x / sqrt(mean(x²) + eps) · weight over rows of width len(weight).
func RMSNorm(x, weight []float64, eps float64) []float64 {
	w := len(weight)
	y := make([]float64, len(x))
	for r := 0; r < len(x); r += w {
		ms := 0.0
		for _, v := range x[r : r+w] {
			ms += v * v
		}
		scale := 1 / math.Sqrt(ms/float64(w)+eps)
		for i := range w {
			y[r+i] = x[r+i] * scale * weight[i]
		}
	}
	return y
}

// SiLU returns x·sigmoid(x).
func SiLU(x float64) float64 { return x / (1 + math.Exp(-x)) }

// SwiGLU returns down(silu(gate(x))·up(x)) for x [rows, width].
func SwiGLU(x, gate, up, down []float64, width, intermediate int) []float64 {
	g, u := Linear(x, gate, width, intermediate), Linear(x, up, width, intermediate)
	for i := range g {
		g[i] = SiLU(g[i]) * u[i]
	}
	return Linear(g, down, intermediate, width)
}

// Scaling is Llama 3's rotary frequency scaling (rope_type "llama3").
type Scaling struct {
	Factor, Low, High float64
	Original          int
}

// Frequencies returns the headDim/2 rotary frequencies theta^(-2i/headDim), with Llama 3's
// scaling when s is not nil: wavelengths 2π/f below Original/High keep f, those above
// Original/Low become f/Factor, and those in between (1-a)·f/Factor + a·f with
// a = (Original/wavelength - Low)/(High - Low).
func Frequencies(theta float64, headDim int, s *Scaling) []float64 {
	f := make([]float64, headDim/2)
	for i := range f {
		f[i] = math.Pow(theta, -float64(2*i)/float64(headDim))
		if s == nil {
			continue
		}
		wavelength := 2 * math.Pi / f[i]
		switch {
		case wavelength < float64(s.Original)/s.High:
		case wavelength > float64(s.Original)/s.Low:
			f[i] /= s.Factor
		default:
			a := (float64(s.Original)/wavelength - s.Low) / (s.High - s.Low)
			f[i] = (1-a)*f[i]/s.Factor + a*f[i]
		}
	}
	return f
}

// Rotate applies rotary embeddings in place to x [batch, seq, heads, headDim]: at position p,
// features i and i + headDim/2 turn by the angle p·freqs[i].
func Rotate(x []float64, batch, seq, heads, headDim int, freqs []float64) {
	half := headDim / 2
	for b := range batch {
		for p := range seq {
			for h := range heads {
				row := x[((b*seq+p)*heads+h)*headDim:][:headDim]
				for i := range half {
					c, s := math.Cos(float64(p)*freqs[i]), math.Sin(float64(p)*freqs[i])
					a, bb := row[i], row[i+half]
					row[i], row[i+half] = a*c-bb*s, bb*c+a*s
				}
			}
		}
	}
}

// Attention returns causal softmax attention for q [batch, seq, heads, headDim] and k, v [batch,
// seq, kvHeads, headDim]: query head h reads key/value head h/(heads/kvHeads), scores scaled by
// 1/sqrt(headDim). The result is [batch, seq, heads, headDim].
func Attention(q, k, v []float64, batch, seq, heads, kvHeads, headDim int) []float64 {
	out := make([]float64, len(q))
	group := heads / kvHeads
	scores := make([]float64, seq)
	for b := range batch {
		for h := range heads {
			n := h / group
			for i := range seq {
				qi := q[((b*seq+i)*heads+h)*headDim:][:headDim]
				top := math.Inf(-1)
				for j := 0; j <= i; j++ {
					kj := k[((b*seq+j)*kvHeads+n)*headDim:][:headDim]
					s := 0.0
					for d := range headDim {
						s += qi[d] * kj[d]
					}
					scores[j] = s / math.Sqrt(float64(headDim))
					top = math.Max(top, scores[j])
				}
				total := 0.0
				for j := 0; j <= i; j++ {
					scores[j] = math.Exp(scores[j] - top)
					total += scores[j]
				}
				o := out[((b*seq+i)*heads+h)*headDim:][:headDim]
				for j := 0; j <= i; j++ {
					vj := v[((b*seq+j)*kvHeads+n)*headDim:][:headDim]
					for d := range headDim {
						o[d] += scores[j] / total * vj[d]
					}
				}
			}
		}
	}
	return out
}

// Config is a Llama's shape, as plain numbers.
type Config struct {
	Vocab, Hidden, Intermediate, Layers, Heads, KVHeads, HeadDim int
	Theta, Eps                                                   float64
	Scaling                                                      *Scaling
	Tied                                                         bool
	// QKVBias: q_proj, k_proj and v_proj have biases (Qwen2).
	QKVBias bool
}

// SelfAttention is LlamaAttention on x [batch, seq, hidden] with the weights of one layer's
// self_attn (q_proj, k_proj, v_proj, o_proj, each [out, in]).
func SelfAttention(c Config, x, wq, wk, wv, wo []float64, batch, seq int) []float64 {
	return BiasedSelfAttention(c, x, wq, wk, wv, wo, nil, nil, nil, batch, seq)
}

// BiasedSelfAttention is SelfAttention with biases bq, bk, bv (nil: none) on the q, k and v
// projections: Qwen2Attention.
func BiasedSelfAttention(c Config, x, wq, wk, wv, wo, bq, bk, bv []float64, batch, seq int) []float64 {
	q := AddBias(Linear(x, wq, c.Hidden, c.Heads*c.HeadDim), bq)
	k := AddBias(Linear(x, wk, c.Hidden, c.KVHeads*c.HeadDim), bk)
	v := AddBias(Linear(x, wv, c.Hidden, c.KVHeads*c.HeadDim), bv)
	freqs := Frequencies(c.Theta, c.HeadDim, c.Scaling)
	Rotate(q, batch, seq, c.Heads, c.HeadDim, freqs)
	Rotate(k, batch, seq, c.KVHeads, c.HeadDim, freqs)
	return Linear(Attention(q, k, v, batch, seq, c.Heads, c.KVHeads, c.HeadDim), wo, c.Heads*c.HeadDim, c.Hidden)
}

// Logits returns LlamaForCausalLM's logits [batch, seq, vocab] for tokens [batch, seq] (with
// c.QKVBias, Qwen2ForCausalLM's), with the weights named by Hugging Face's names with "/" for "."
// and a final "/weight" or "/bias" ("model/norm/weight").
func Logits(c Config, w map[string][]float64, tokens []int, batch, seq int) []float64 {
	embed := w["/model/embed_tokens/weight"]
	x := make([]float64, 0, batch*seq*c.Hidden)
	for _, t := range tokens {
		x = append(x, embed[t*c.Hidden:(t+1)*c.Hidden]...)
	}
	for l := range c.Layers {
		v := func(name, kind string) []float64 {
			values, ok := w["/model/layers/"+strconv.Itoa(l)+"/"+name+"/"+kind]
			if !ok {
				panic("plainllama: no " + kind + " " + name + " in layer " + strconv.Itoa(l))
			}
			return values
		}
		p := func(name string) []float64 { return v(name, "weight") }
		var bq, bk, bv []float64
		if c.QKVBias {
			bq, bk, bv = v("self_attn/q_proj", "bias"), v("self_attn/k_proj", "bias"), v("self_attn/v_proj", "bias")
		}
		h := RMSNorm(x, p("input_layernorm"), c.Eps)
		add(x, BiasedSelfAttention(c, h, p("self_attn/q_proj"), p("self_attn/k_proj"), p("self_attn/v_proj"), p("self_attn/o_proj"), bq, bk, bv, batch, seq))
		h = RMSNorm(x, p("post_attention_layernorm"), c.Eps)
		add(x, SwiGLU(h, p("mlp/gate_proj"), p("mlp/up_proj"), p("mlp/down_proj"), c.Hidden, c.Intermediate))
	}
	x = RMSNorm(x, w["/model/norm/weight"], c.Eps)
	head := embed
	if !c.Tied {
		head = w["/lm_head/weight"]
	}
	return Linear(x, head, c.Hidden, c.Vocab)
}

func add(x, y []float64) {
	for i := range x {
		x[i] += y[i]
	}
}
