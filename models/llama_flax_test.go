package models_test

import (
	"encoding/binary"
	"encoding/json"
	"math"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"testing"

	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/gomlx/gomlx/pkg/ml/context"

	"github.com/onegpu/onegpu/internal/testkit"
	"github.com/onegpu/onegpu/models"
)

// hfConfig is c as Hugging Face's config.json writes it (the keys reference/jax/models.py reads).
func hfConfig(c models.LlamaConfig) map[string]any {
	m := map[string]any{"vocab_size": c.Vocab, "hidden_size": c.Hidden, "intermediate_size": c.Intermediate,
		"num_hidden_layers": c.Layers, "num_attention_heads": c.Heads, "num_key_value_heads": c.KVHeads, "head_dim": c.HeadDim,
		"rope_theta": c.RopeTheta, "rms_norm_eps": c.NormEpsilon, "tie_word_embeddings": c.TiedEmbeddings, "rope_scaling": nil}
	if s := c.RopeScaling; s != nil {
		m["rope_scaling"] = map[string]any{"rope_type": "llama3", "factor": s.Factor, "low_freq_factor": s.LowFreqFactor,
			"high_freq_factor": s.HighFreqFactor, "original_max_position_embeddings": s.OriginalMaxPositions}
	}
	return m
}

// TestLlamaMatchesFlax: the Flax Llama of reference/jax (what `onegpu compare --model llama` runs
// on the JAX side) and models.Llama, on the same weights and tokens in float32, give the same mean
// cross-entropy (within 1e-5 relative) and the same gradients (within 1e-5 relative L2), every
// Flax parameter loading into the onegpu variable of the same path and every variable getting one:
// tied embeddings with grouped heads and Llama 3's rotary scaling, and untied with multi-head
// attention. Runs the repository's Python (the venv .ci/run creates, or $ONEGPU_PYTHON).
func TestLlamaMatchesFlax(t *testing.T) {
	python := os.Getenv("ONEGPU_PYTHON")
	if python == "" {
		python, _ = filepath.Abs(filepath.Join("..", ".venv", "bin", "python"))
	}
	if _, err := os.Stat(python); err != nil {
		t.Skip("no ../.venv/bin/python (.ci/run creates it) and no $ONEGPU_PYTHON: the Flax Llama is not run")
	}
	if testing.Short() {
		t.Skip("starts JAX (tens of seconds)")
	}
	untied := tinyLlama(false)
	untied.KVHeads, untied.RopeScaling = untied.Heads, nil
	cases := map[string]models.LlamaConfig{"tied": tinyLlama(true), "untied": untied}
	const batch = 3
	var spec []map[string]any
	for name, c := range cases {
		spec = append(spec, map[string]any{"name": name, "llama": hfConfig(c), "batch": batch, "seq": c.SeqLen, "seed": 5})
	}
	dir := t.TempDir()
	writeJSON(t, filepath.Join(dir, "config.json"), spec)
	if out, err := exec.Command(python, filepath.Join("..", "reference", "jax", "llama_check.py"), dir).CombinedOutput(); err != nil {
		t.Fatalf("reference/jax/llama_check.py failed: %v\n%s", err, out)
	}
	for name, c := range cases {
		var result struct {
			Loss   float64
			Params []struct {
				Path  string
				Shape []int
			}
		}
		readJSON(t, filepath.Join(dir, name, "result.json"), &result)
		tokens := readInt32s(t, filepath.Join(dir, name, "tokens.bin"))
		labels := readInt32s(t, filepath.Join(dir, name, "labels.bin"))
		m, err := models.NewLlama(c)
		if err != nil {
			t.Fatal(err)
		}
		for _, backend := range testkit.All() {
			ctx := context.New()
			for _, p := range result.Params {
				values := readFloat32s(t, filepath.Join(dir, name, "params", p.Path+".bin"))
				ctx.InAbsPath("/"+path.Dir(p.Path)).VariableWithValue(path.Base(p.Path), tensors.FromFlatDataAndDimensions(values, p.Shape...))
			}
			ctx = ctx.Reuse() // the model must find every variable among Flax's parameters
			var names []string
			exec, err := context.NewExec(backend, ctx, func(ctx *context.Context, tokens, labels *graph.Node) []*graph.Node {
				sum, count := m.CrossEntropy(ctx, tokens, labels, nil)
				loss := graph.Div(sum, count)
				var wrt []*graph.Node
				for v := range ctx.IterVariables() {
					names, wrt = append(names, v.ScopeAndName()), append(wrt, v.ValueGraph(loss.Graph()))
				}
				return append([]*graph.Node{loss}, graph.Gradient(loss, wrt...)...)
			})
			if err != nil {
				t.Fatal(err)
			}
			outs, err := exec.Exec(tensors.FromFlatDataAndDimensions(tokens, batch, c.SeqLen), tensors.FromFlatDataAndDimensions(labels, batch, c.SeqLen))
			exec.Finalize()
			if err != nil {
				t.Fatalf("%s on %s: %v", name, backend.Name(), err)
			}
			loss := testkit.Floats(outs[0])[0]
			worst, worstName := 0.0, ""
			for i, n := range names {
				want := float32sAsFloat64(readFloat32s(t, filepath.Join(dir, name, "grads", n[1:]+".bin")))
				if d := testkit.RelL2(testkit.Floats(outs[i+1]), want); !(d <= worst) {
					worst, worstName = d, n
				}
			}
			t.Logf("%s on %s: loss onegpu %.7f, Flax %.7f (relative %.2g); worst gradient %s, relative L2 %.2g (%d parameters)",
				name, backend.Name(), loss, result.Loss, math.Abs(loss-result.Loss)/result.Loss, worstName, worst, len(names))
			if math.Abs(loss-result.Loss) > 1e-5*result.Loss {
				t.Errorf("%s on %s: loss %.7f, Flax's %.7f", name, backend.Name(), loss, result.Loss)
			}
			if !(worst <= 1e-5) {
				t.Errorf("%s on %s: the gradient of %s differs from Flax's by %.3g (relative L2)", name, backend.Name(), worstName, worst)
			}
			if len(names) != len(result.Params) {
				t.Errorf("%s: onegpu has %d variables, Flax %d parameters", name, len(names), len(result.Params))
			}
		}
	}
}

func writeJSON(t *testing.T, file string, v any) {
	t.Helper()
	data, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(file, data, 0o644); err != nil {
		t.Fatal(err)
	}
}

func readJSON(t *testing.T, file string, v any) {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, v); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
}

// readFloat32s reads raw little-endian float32 values (NumPy's tofile).
func readFloat32s(t *testing.T, file string) []float32 {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	values := make([]float32, len(data)/4)
	for i := range values {
		values[i] = math.Float32frombits(binary.LittleEndian.Uint32(data[4*i:]))
	}
	return values
}

func readInt32s(t *testing.T, file string) []int32 {
	t.Helper()
	raw := readFloat32s(t, file)
	values := make([]int32, len(raw))
	for i, f := range raw {
		values[i] = int32(math.Float32bits(f))
	}
	return values
}

func float32sAsFloat64(values []float32) []float64 {
	out := make([]float64, len(values))
	for i, v := range values {
		out[i] = float64(v)
	}
	return out
}
