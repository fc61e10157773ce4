package hf_test

import (
	"encoding/binary"
	"encoding/json"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/dtypes/bfloat16"
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/gomlx/gomlx/pkg/ml/context"

	"github.com/onegpu/onegpu/hf"
	"github.com/onegpu/onegpu/hf/safetensors"
	"github.com/onegpu/onegpu/models"
)

// rawTensor is one tensor of a checkpoint as its file holds it.
type rawTensor struct {
	dtype safetensors.DType
	shape []int
	data  []byte
}

// float32s decodes an F32 or BF16 tensor's values (exact).
func (r rawTensor) float32s(t *testing.T) []float32 {
	t.Helper()
	var out []float32
	switch r.dtype {
	case safetensors.F32:
		for i := 0; i < len(r.data); i += 4 {
			out = append(out, math.Float32frombits(binary.LittleEndian.Uint32(r.data[i:])))
		}
	case safetensors.BF16:
		for i := 0; i < len(r.data); i += 2 {
			out = append(out, math.Float32frombits(uint32(binary.LittleEndian.Uint16(r.data[i:]))<<16))
		}
	default:
		t.Fatalf("dtype %s", r.dtype)
	}
	return out
}

// readCheckpoint reads every tensor of a fixture folder with the safetensors package alone (the
// index parsed here), as the independent view of what the files hold.
func readCheckpoint(t *testing.T, dir string) map[string]rawTensor {
	t.Helper()
	files := []string{"model.safetensors"}
	if raw, err := os.ReadFile(filepath.Join(dir, "model.safetensors.index.json")); err == nil {
		var idx struct {
			WeightMap map[string]string `json:"weight_map"`
		}
		if err := json.Unmarshal(raw, &idx); err != nil {
			t.Fatal(err)
		}
		seen := map[string]bool{}
		files = nil
		for _, f := range idx.WeightMap {
			if !seen[f] {
				seen[f] = true
				files = append(files, f)
			}
		}
	}
	out := map[string]rawTensor{}
	for _, name := range files {
		f, err := safetensors.Open(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		for _, ti := range f.Tensors {
			data, err := f.ReadTensor(ti.Name)
			if err != nil {
				t.Fatal(err)
			}
			out[ti.Name] = rawTensor{ti.DType, ti.Shape, data}
		}
		f.Close()
	}
	return out
}

// writeCheckpoint writes a folder with config.json and model.safetensors holding tensors.
func writeCheckpoint(t *testing.T, dir string, config []byte, ts map[string]rawTensor) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "config.json"), config, 0o644); err != nil {
		t.Fatal(err)
	}
	var list []safetensors.Tensor
	for name, r := range ts {
		list = append(list, safetensors.Tensor{Name: name, DType: r.dtype, Shape: r.shape,
			Data: func(w io.Writer) error { _, err := w.Write(r.data); return err }})
	}
	if err := safetensors.WriteFile(filepath.Join(dir, "model.safetensors"), list, map[string]string{"format": "pt"}); err != nil {
		t.Fatal(err)
	}
}

// variableFloat32s returns a float32, bfloat16 or float16 variable's values as float32.
func variableFloat32s(t *testing.T, v *context.Variable) []float32 {
	t.Helper()
	value := v.MustValue()
	switch v.DType() {
	case dtypes.Float32:
		return tensors.MustCopyFlatData[float32](value)
	case dtypes.BFloat16:
		var out []float32
		for _, b := range tensors.MustCopyFlatData[bfloat16.BFloat16](value) {
			out = append(out, b.Float32())
		}
		return out
	}
	t.Fatalf("variable %s is %s", v.ScopeAndName(), v.DType())
	return nil
}

func variable(ctx *context.Context, tensorName string) *context.Variable {
	scope, name := hf.VariableOf(ctx, tensorName)
	return scope.GetVariableByScopeAndName(scope.Scope(), name)
}

// TestLoadFixtures: both fixtures (float32 in one file; bfloat16 in three shards) load into float32
// variables named and shaped as models.Llama's, value for value.
func TestLoadFixtures(t *testing.T) {
	for _, tc := range []struct {
		dir  string
		want models.LlamaConfig
	}{{untiedDir, untiedConfig}, {tiedDir, tiedConfig}} {
		t.Run(filepath.Base(tc.dir), func(t *testing.T) {
			ctx := context.New()
			p, err := hf.Open(ctx, tc.dir, dtypes.Float32, 0)
			if err != nil {
				t.Fatal(err)
			}
			c := configOf(t, p.Layout)
			if withoutDescription(c).RopeTheta != tc.want.RopeTheta || c.Layers != tc.want.Layers || p.Dir != tc.dir || p.Model != p.Layout.Model() {
				t.Errorf("config %+v, opened %+v", c, p)
			}
			files := readCheckpoint(t, tc.dir)
			specs := p.Layout.Tensors()
			if len(files) != len(specs) || ctx.NumVariables() != len(specs) || int64(ctx.NumParameters()) != c.Params() {
				t.Fatalf("%d tensors in the files, %d specs, %d variables (%d parameters, config %d)", len(files), len(specs), ctx.NumVariables(), ctx.NumParameters(), c.Params())
			}
			for _, spec := range specs {
				v := variable(ctx, spec.Name)
				if v == nil || v.DType() != dtypes.Float32 || !v.Shape().Equal(shapes.Make(dtypes.Float32, spec.Shape...)) {
					t.Fatalf("%s: variable %v", spec.Name, v)
				}
				got, want := variableFloat32s(t, v), files[spec.Name].float32s(t)
				for i := range want {
					if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
						t.Fatalf("%s[%d] = %v, the file holds %v", spec.Name, i, got[i], want[i])
					}
				}
			}
		})
	}
}

// TestLoadIntoBFloat16 rounds float32 weights to the nearest bfloat16 (half a unit in the last
// place at most: 2^-8 relative, bfloat16 having 8 significant bits) and keeps the dtype of variables that exist already.
func TestLoadIntoBFloat16(t *testing.T) {
	ctx := context.New()
	// One variable exists already, in float32: it keeps its dtype.
	scope, name := hf.VariableOf(ctx, "model.norm.weight")
	scope.VariableWithValue(name, tensors.FromShape(shapes.Make(dtypes.Float32, 64)))
	p, err := hf.Open(ctx, untiedDir, dtypes.BFloat16, 0)
	if err != nil {
		t.Fatal(err)
	}
	files := readCheckpoint(t, untiedDir)
	for _, spec := range p.Layout.Tensors() {
		v := variable(ctx, spec.Name)
		wantDType := dtypes.BFloat16
		if spec.Name == "model.norm.weight" {
			wantDType = dtypes.Float32
		}
		if v.DType() != wantDType {
			t.Fatalf("%s is %s, want %s", spec.Name, v.DType(), wantDType)
		}
		got, want := variableFloat32s(t, v), files[spec.Name].float32s(t)
		for i := range want {
			if d := math.Abs(float64(got[i]) - float64(want[i])); d > math.Abs(float64(want[i]))*math.Ldexp(1, -8) {
				t.Fatalf("%s[%d] = %v from %v: off by %g", spec.Name, i, got[i], want[i], d)
			}
		}
	}
}

// copyFixture returns a modified copy of the untied fixture in a temporary folder.
func copyFixture(t *testing.T, config map[string]any, change func(ts map[string]rawTensor)) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "model")
	ts := readCheckpoint(t, untiedDir)
	if change != nil {
		change(ts)
	}
	writeCheckpoint(t, dir, edit(t, config), ts)
	return dir
}

// TestLoadRefuses: a checkpoint that does not fit is an error naming each bad tensor, and leaves
// the context without a single new variable.
func TestLoadRefuses(t *testing.T) {
	for _, tc := range []struct {
		name   string
		config map[string]any
		change func(ts map[string]rawTensor)
		want   []string
	}{
		{"missing", nil, func(ts map[string]rawTensor) { delete(ts, "model.layers.1.mlp.up_proj.weight") },
			[]string{"1 tensors the model needs are missing: model.layers.1.mlp.up_proj.weight"}},
		{"extra", nil, func(ts map[string]rawTensor) {
			ts["model.layers.0.self_attn.q_proj.bias"] = rawTensor{safetensors.F32, []int{64}, make([]byte, 256)}
		}, []string{"1 tensors are not part of the llama model config.json describes", "model.layers.0.self_attn.q_proj.bias"}},
		{"misshapen", nil, func(ts map[string]rawTensor) {
			r := ts["model.layers.0.self_attn.k_proj.weight"]
			ts["model.layers.0.self_attn.k_proj.weight"] = rawTensor{r.dtype, []int{64, 32}, r.data}
		}, []string{"model.layers.0.self_attn.k_proj.weight in ", "has shape [64 32], the config gives [32 64]"}},
		{"integer weights", nil, func(ts map[string]rawTensor) {
			r := ts["model.norm.weight"]
			ts["model.norm.weight"] = rawTensor{safetensors.I32, r.shape, r.data}
		}, []string{"model.norm.weight", "is I32"}},
		{"config with more layers", map[string]any{"num_hidden_layers": 3}, nil,
			[]string{"describes 3 layers, 143808 parameters", "hold 2 layers, 21 tensors of 106816 parameters"}},
		{"tied config, untied weights", map[string]any{"tie_word_embeddings": true}, nil,
			[]string{"lm_head.weight differs from model.embed_tokens.weight", "tie_word_embeddings"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := copyFixture(t, tc.config, tc.change)
			ctx := context.New()
			_, err := hf.Open(ctx, dir, dtypes.Float32, 0)
			if err == nil {
				t.Fatal("no error")
			}
			for _, want := range append(tc.want, dir, "nothing was loaded") {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not contain %q", err, want)
				}
			}
			if n := ctx.NumVariables(); n != 0 {
				t.Errorf("the failed load created %d variables", n)
			}
		})
	}
}

// TestLoadAccepts: derived rotary frequencies are skipped; with tied embeddings an lm_head that
// copies them is accepted.
func TestLoadAccepts(t *testing.T) {
	dir := copyFixture(t, map[string]any{"tie_word_embeddings": true}, func(ts map[string]rawTensor) {
		ts["lm_head.weight"] = ts["model.embed_tokens.weight"]
		ts["model.layers.1.self_attn.rotary_emb.inv_freq"] = rawTensor{safetensors.F32, []int{8}, make([]byte, 32)}
	})
	ctx := context.New()
	p, err := hf.Open(ctx, dir, dtypes.Float32, 0)
	if err != nil {
		t.Fatal(err)
	}
	if !configOf(t, p.Layout).TiedEmbeddings || ctx.NumVariables() != len(p.Layout.Tensors()) || variable(ctx, "lm_head.weight") != nil {
		t.Errorf("tied: %d variables, lm_head %v", ctx.NumVariables(), variable(ctx, "lm_head.weight"))
	}
}

// TestLoadExistingVariableMisshapen: a context holding another model's variable is refused.
func TestLoadExistingVariableMisshapen(t *testing.T) {
	ctx := context.New()
	scope, name := hf.VariableOf(ctx, "model.embed_tokens.weight")
	scope.VariableWithValue(name, tensors.FromShape(shapes.Make(dtypes.Float32, 32000, 64)))
	_, err := hf.Open(ctx, untiedDir, dtypes.Float32, 0)
	if err == nil || !strings.Contains(err.Error(), "variable /model/embed_tokens/weight has shape [32000 64], the checkpoint's model.embed_tokens.weight [256 64]") {
		t.Fatalf("error %v", err)
	}
	if ctx.NumVariables() != 1 {
		t.Errorf("%d variables", ctx.NumVariables())
	}
}

// TestLoadFolderErrors: folders without weights, and indexes that disagree with their shards.
func TestLoadFolderErrors(t *testing.T) {
	config, _ := os.ReadFile(filepath.Join(tiedDir, "config.json"))
	shardOf := func(t *testing.T) (string, map[string]string) {
		dir := filepath.Join(t.TempDir(), "m")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		entries, _ := os.ReadDir(tiedDir)
		for _, e := range entries {
			raw, _ := os.ReadFile(filepath.Join(tiedDir, e.Name()))
			_ = os.WriteFile(filepath.Join(dir, e.Name()), raw, 0o644)
		}
		raw, _ := os.ReadFile(filepath.Join(dir, "model.safetensors.index.json"))
		var idx struct {
			WeightMap map[string]string `json:"weight_map"`
		}
		_ = json.Unmarshal(raw, &idx)
		return dir, idx.WeightMap
	}
	writeIndex := func(t *testing.T, dir string, wm map[string]string) {
		raw, _ := json.Marshal(map[string]any{"weight_map": wm})
		if err := os.WriteFile(filepath.Join(dir, "model.safetensors.index.json"), raw, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	t.Run("no weights", func(t *testing.T) {
		dir := t.TempDir()
		_ = os.WriteFile(filepath.Join(dir, "config.json"), config, 0o644)
		_ = os.WriteFile(filepath.Join(dir, "pytorch_model.bin"), []byte("pickle"), 0o644)
		_, err := hf.Open(context.New(), dir, dtypes.Float32, 0)
		if err == nil || !strings.Contains(err.Error(), "holds neither model.safetensors nor model.safetensors.index.json (it holds: config.json, pytorch_model.bin)") ||
			!strings.Contains(err.Error(), "pickle") {
			t.Fatalf("error %v", err)
		}
	})
	t.Run("shard outside the folder", func(t *testing.T) {
		dir, wm := shardOf(t)
		wm["model.norm.weight"] = "../model-00001-of-00003.safetensors"
		writeIndex(t, dir, wm)
		if _, err := hf.Open(context.New(), dir, dtypes.Float32, 0); err == nil || !strings.Contains(err.Error(), `not a file name in the folder`) {
			t.Fatalf("error %v", err)
		}
	})
	t.Run("tensor not in its shard", func(t *testing.T) {
		dir, wm := shardOf(t)
		wm["model.norm.weight"] = "model-00001-of-00003.safetensors"
		writeIndex(t, dir, wm)
		_, err := hf.Open(context.New(), dir, dtypes.Float32, 0)
		if err == nil || !strings.Contains(err.Error(), `puts tensor "model.norm.weight" in model-00001-of-00003.safetensors, which does not hold it`) {
			t.Fatalf("error %v", err)
		}
	})
	t.Run("shard tensor not in the index", func(t *testing.T) {
		dir, wm := shardOf(t)
		delete(wm, "model.norm.weight")
		writeIndex(t, dir, wm)
		_, err := hf.Open(context.New(), dir, dtypes.Float32, 0)
		if err == nil || !strings.Contains(err.Error(), `holds tensor "model.norm.weight", which model.safetensors.index.json does not map to it`) {
			t.Fatalf("error %v", err)
		}
	})
	t.Run("integer param dtype", func(t *testing.T) {
		if _, err := hf.Open(context.New(), tiedDir, dtypes.Int32, 0); err == nil || !strings.Contains(err.Error(), "not a floating-point dtype") {
			t.Fatalf("error %v", err)
		}
	})
}
