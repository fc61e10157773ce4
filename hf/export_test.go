package hf_test

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/ml/context"

	"github.com/onegpu/onegpu/hf"
	"github.com/onegpu/onegpu/hf/safetensors"
	"github.com/onegpu/onegpu/internal/testkit"
	"github.com/onegpu/onegpu/models"
)

func load(t *testing.T, dir string, param dtypes.DType) *context.Context {
	t.Helper()
	ctx := context.New()
	if _, err := hf.Open(ctx, dir, param, 0); err != nil {
		t.Fatal(err)
	}
	return ctx
}

// llama is the models.Llama of config c, as a model to export.
func llama(c models.LlamaConfig) models.Llama { return models.Llama{Config: c} }

func files(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	sort.Strings(names)
	return names
}

// TestExportRoundTrip: float32 weights exported in float32 are the fixture's bytes, in one file with
// transformers' metadata, and config.json reads back as the same config.
func TestExportRoundTrip(t *testing.T) {
	out := filepath.Join(t.TempDir(), "out")
	if err := hf.Export(load(t, untiedDir, dtypes.Float32), out, llama(untiedConfig), hf.ExportOptions{}); err != nil {
		t.Fatal(err)
	}
	if got := files(t, out); !reflect.DeepEqual(got, []string{"config.json", "model.safetensors", hf.MarkerFile}) {
		t.Errorf("files %v", got)
	}
	l, err := hf.ReadConfig(out, 0)
	if err != nil {
		t.Fatal(err)
	}
	if c := configOf(t, l); !reflect.DeepEqual(withoutDescription(c), untiedConfig) {
		t.Errorf("config read back: %+v", c)
	}
	want, got := readCheckpoint(t, untiedDir), readCheckpoint(t, out)
	if !reflect.DeepEqual(got, want) {
		t.Errorf("exported tensors differ from the fixture's")
	}
	f, err := safetensors.Open(filepath.Join(out, "model.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if f.Metadata["format"] != "pt" {
		t.Errorf("metadata %v: transformers needs format pt", f.Metadata)
	}
}

// TestExportShardedBFloat16: bfloat16 weights of a bfloat16 checkpoint, loaded in float32 and
// exported in bfloat16, are the original bytes; a small shard limit gives shards and an index that
// load back; exporting again in one file removes the shards.
func TestExportShardedBFloat16(t *testing.T) {
	ctx := load(t, tiedDir, dtypes.Float32)
	out := filepath.Join(t.TempDir(), "out")
	if err := hf.Export(ctx, out, llama(tiedConfig), hf.ExportOptions{DType: dtypes.BFloat16, MaxShardBytes: 10_000, From: tiedDir}); err != nil {
		t.Fatal(err)
	}
	names := files(t, out)
	if len(names) < 7 || names[len(names)-2] != "model.safetensors.index.json" || names[len(names)-1] != hf.MarkerFile || !strings.HasPrefix(names[2], "model-00001-of-0000") {
		t.Fatalf("files %v", names)
	}
	for _, n := range names {
		if st, _ := os.Stat(filepath.Join(out, n)); strings.HasPrefix(n, "model-") && st.Size() > 10_000+2_000 {
			t.Errorf("%s has %d bytes, over the 10,000-byte limit by more than a header", n, st.Size())
		}
	}
	if want, got := readCheckpoint(t, tiedDir), readCheckpoint(t, out); !reflect.DeepEqual(got, want) {
		t.Errorf("exported tensors differ from the fixture's")
	}
	back := load(t, out, dtypes.Float32)
	if back.NumVariables() != ctx.NumVariables() {
		t.Errorf("%d variables loaded back, %d exported", back.NumVariables(), ctx.NumVariables())
	}
	// The source's other config fields and generation settings came along.
	var config map[string]any
	raw, _ := os.ReadFile(filepath.Join(out, "config.json"))
	_ = json.Unmarshal(raw, &config)
	if config["bos_token_id"] != 1.0 || config["torch_dtype"] != "bfloat16" || config["rope_parameters"] != nil || config["rope_theta"] != 10000.0 {
		t.Errorf("config.json: %v", config)
	}
	if _, err := os.Stat(filepath.Join(out, "generation_config.json")); err != nil {
		t.Error(err)
	}
	// Again, in one file: the shards and the index of the first export are gone.
	if err := hf.Export(ctx, out, llama(tiedConfig), hf.ExportOptions{DType: dtypes.BFloat16}); err != nil {
		t.Fatal(err)
	}
	if got := files(t, out); !reflect.DeepEqual(got, []string{"config.json", "generation_config.json", "model.safetensors", hf.MarkerFile}) {
		t.Errorf("files after the second export: %v", got)
	}
}

// TestExportRoundsToBFloat16: float32 weights exported in bfloat16 are within half a unit in the
// last place.
func TestExportRoundsToBFloat16(t *testing.T) {
	out := filepath.Join(t.TempDir(), "out")
	if err := hf.Export(load(t, untiedDir, dtypes.Float32), out, llama(untiedConfig), hf.ExportOptions{DType: dtypes.BFloat16}); err != nil {
		t.Fatal(err)
	}
	want, got := readCheckpoint(t, untiedDir), readCheckpoint(t, out)
	for name, w := range want {
		g := got[name]
		if g.dtype != safetensors.BF16 {
			t.Fatalf("%s is %s", name, g.dtype)
		}
		gv, wv := g.float32s(t), w.float32s(t)
		for i := range wv {
			if d := math.Abs(float64(gv[i]) - float64(wv[i])); d > math.Abs(float64(wv[i]))*math.Ldexp(1, -8) {
				t.Fatalf("%s[%d]: %v for %v", name, i, gv[i], wv[i])
			}
		}
	}
}

// TestExportRefuses: a context without the model's variables, or with other shapes, writes
// nothing.
func TestExportRefuses(t *testing.T) {
	out := filepath.Join(t.TempDir(), "out")
	ctx := load(t, untiedDir, dtypes.Float32)
	bigger := untiedConfig
	bigger.Layers = 3
	err := hf.Export(ctx, out, llama(bigger), hf.ExportOptions{})
	if err == nil || !strings.Contains(err.Error(), "no variable for model.layers.2.input_layernorm.weight (/model/layers/2/input_layernorm/weight)") {
		t.Fatalf("error %v", err)
	}
	wider := untiedConfig
	wider.Vocab = 512
	if err := hf.Export(ctx, out, llama(wider), hf.ExportOptions{}); err == nil || !strings.Contains(err.Error(), "has shape [256 64], the config gives model.embed_tokens.weight [512 64]") {
		t.Fatalf("error %v", err)
	}
	if err := hf.Export(ctx, out, llama(untiedConfig), hf.ExportOptions{DType: dtypes.Float16}); err == nil || !strings.Contains(err.Error(), "float32 or bfloat16") {
		t.Fatalf("error %v", err)
	}
	if _, err := os.Stat(out); !os.IsNotExist(err) {
		t.Errorf("the refused exports created %s", out)
	}
}

// transformersPython is a Python with torch and transformers (reference/hf/requirements.txt), from
// $ONEGPU_TRANSFORMERS_PYTHON, or "": CI does not install torch.
func transformersPython() string { return os.Getenv("ONEGPU_TRANSFORMERS_PYTHON") }

// compareInTransformers loads an exported folder in transformers and returns the script's report:
// the largest differences of its logits and weights from the fixture's, and the class transformers
// built.
func compareInTransformers(t *testing.T, exported, fixture string) (logits, weights float64, class string) {
	t.Helper()
	python := transformersPython()
	script := filepath.Join("..", "reference", "hf", "make_fixture.py")
	cmd := exec.Command(python, script, "compare", exported, fixture)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s compare: %v\n%s", script, err, out)
	}
	var report struct {
		Logits  float64 `json:"max_abs_logits_difference"`
		Weights float64 `json:"max_abs_weight_difference"`
		Class   string  `json:"class"`
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &report); err != nil {
		t.Fatalf("report %q: %v", out, err)
	}
	t.Logf("transformers on %s vs %s: %s, max |Δlogits| %.3g, max |Δweights| %.3g", filepath.Base(exported), filepath.Base(fixture), report.Class, report.Logits, report.Weights)
	return report.Logits, report.Weights, report.Class
}

// TestTransformersLoadsExport: transformers loads what Export writes, unchanged, as the class of the
// fixture's family, and computes the fixture's logits from it: every committed fixture in float32,
// and the bfloat16 one in bfloat16 shards (run where $ONEGPU_TRANSFORMERS_PYTHON names a Python
// with reference/hf/requirements.txt installed).
func TestTransformersLoadsExport(t *testing.T) {
	if transformersPython() == "" {
		t.Skip("$ONEGPU_TRANSFORMERS_PYTHON is not set (a Python with torch and transformers, reference/hf/requirements.txt): transformers' reading of the export is not checked")
	}
	type export struct {
		fixture string
		opts    hf.ExportOptions
	}
	exports := []export{{tiedDir, hf.ExportOptions{DType: dtypes.BFloat16, MaxShardBytes: 20_000}}}
	for _, name := range testkit.HFFixtureNames(t) {
		exports = append(exports, export{filepath.Join("testdata", name), hf.ExportOptions{}})
	}
	for i, e := range exports {
		p, err := hf.Open(context.New(), e.fixture, dtypes.Float32, 0)
		if err != nil {
			t.Fatal(err)
		}
		out := filepath.Join(t.TempDir(), fmt.Sprint(i))
		if err := hf.Export(p.Ctx, out, p.Model, e.opts); err != nil {
			t.Fatal(err)
		}
		logits, weights, class := compareInTransformers(t, out, e.fixture)
		if want := p.Layout.Config()["architectures"].([]string)[0]; logits != 0 || weights != 0 || class != want {
			t.Errorf("%s: transformers built a %s (want %s), its logits differ by %g, weights by %g: the export changed the model", out, class, want, logits, weights)
		}
	}
}
