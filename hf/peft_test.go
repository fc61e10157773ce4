package hf_test

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/gomlx/gomlx/pkg/ml/context"

	"github.com/onegpu/onegpu/hf"
	"github.com/onegpu/onegpu/internal/testkit"
	"github.com/onegpu/onegpu/layers"
)

// peftFixtures are the adapters reference/hf/peft_fixture.py made with peft, by base fixture.
var peftFixtures = map[string]string{"llama3_untied_lora": "llama3_untied", "tied_bf16_sharded_lora": "tied_bf16_sharded"}

// readPeftFixture returns the adapter folder and its logits (the base fixture's tokens).
func readPeftFixture(t *testing.T, name string) (string, testkit.HFFixture) {
	t.Helper()
	fx := testkit.ReadHFFixture(t, filepath.Join("peft", name))
	return fx.Dir, fx
}

// TestAdaptersMatchPEFT: an adapter that peft saved, loaded on its base (LoadAdapter) and applied
// by the projections under its LoRA, gives peft's logits within 1e-4 on every backend; exported
// again (ExportAdapter) and reloaded, the same tensors and config.
func TestAdaptersMatchPEFT(t *testing.T) {
	for name, base := range peftFixtures {
		dir, fx := readPeftFixture(t, name)
		for _, backend := range testkit.All() {
			t.Run(fmt.Sprintf("%s/%s", name, backend.Name()), func(t *testing.T) {
				p, err := hf.Open(context.New(), testkit.ReadHFFixture(t, base).Dir, dtypes.Float32, 0)
				if err != nil {
					t.Fatal(err)
				}
				lora, err := hf.LoadAdapter(p.Ctx, dir, p.Layout, dtypes.Float32)
				if err != nil {
					t.Fatal(err)
				}
				layers.SetLoRA(p.Ctx, lora)
				worst := maxLogitsError(t, backend, p, fx)
				t.Logf("logits within %.3g of peft's (max abs)", worst)
				if worst > 1e-4 {
					t.Errorf("logits differ from peft's by %.3g (max abs), want <= 1e-4", worst)
				}

				out := filepath.Join(t.TempDir(), "adapter")
				if err := hf.ExportAdapter(p.Ctx, out, p.Layout, lora, hf.AdapterOptions{Base: base}); err != nil {
					t.Fatal(err)
				}
				again, gotBase, err := hf.ReadAdapterConfig(out)
				slices.Sort(again.Targets) // a set to peft, which writes it in any order
				slices.Sort(lora.Targets)
				if err != nil || again.String() != lora.String() || gotBase != base {
					t.Fatalf("exported config reads back as %v (base %q), %v; want %v", again, gotBase, err, lora)
				}
				fresh, err := hf.Open(context.New(), testkit.ReadHFFixture(t, base).Dir, dtypes.Float32, 0)
				if err != nil {
					t.Fatal(err)
				}
				if _, err := hf.LoadAdapter(fresh.Ctx, out, fresh.Layout, dtypes.Float32); err != nil {
					t.Fatal(err)
				}
				for v := range p.Ctx.IterVariables() {
					if layers.IsAdapter(v) {
						w := fresh.Ctx.GetVariableByScopeAndName(v.Scope(), v.Name())
						if w == nil || !slices.Equal(testkit.Floats(w.MustValue()), testkit.Floats(v.MustValue())) {
							t.Fatalf("adapter %s did not survive export and reload", v.ScopeAndName())
						}
					}
				}
			})
		}
	}
}

// TestAdapterTensors: the adapters of a LoRA are named and shaped as peft names them, for the
// model's projections only; a target the model lacks and a rank above a matrix's side are errors.
func TestAdapterTensors(t *testing.T) {
	layout, err := hf.ReadConfig(testkit.ReadHFFixture(t, "llama3_untied").Dir, 0)
	if err != nil {
		t.Fatal(err)
	}
	specs, err := hf.AdapterTensors(layout, layers.LoRA{Rank: 3, Targets: []string{"k_proj", "down_proj"}})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"model.layers.0.self_attn.k_proj.lora_A.weight [3 64]", "model.layers.0.self_attn.k_proj.lora_B.weight [32 3]",
		"model.layers.0.mlp.down_proj.lora_A.weight [3 128]", "model.layers.0.mlp.down_proj.lora_B.weight [64 3]",
	}
	var got []string
	for _, s := range specs {
		got = append(got, fmt.Sprintf("%s %v", s.Name, s.Shape))
	}
	if len(got) != 8 || !slices.Equal(got[:4], want) {
		t.Errorf("adapters %v, want %v and layer 1's", got, want)
	}
	for lora, msg := range map[string]string{
		"rank=2,targets=q,x_proj":  `target "x_proj" is not a projection of the llama model's layers: they are q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj`,
		"rank=2,targets=lm_head":   `target "lm_head" is not a projection`,
		"rank=33,targets=k":        "LoRA.Rank 33 is larger than model.layers.0.self_attn.k_proj's matrix [32, 64] (at most 32)",
		"rank=64,targets=gate,q,v": "LoRA.Rank 64 is larger than model.layers.0.self_attn.k_proj",
	} {
		l, err := layers.ParseLoRA(lora)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := hf.AdapterTensors(layout, l); err == nil || !strings.Contains(err.Error(), msg) {
			if !(lora == "rank=64,targets=gate,q,v" && err != nil && strings.Contains(err.Error(), "LoRA.Rank 64 is larger")) {
				t.Errorf("%s: error %v, want one saying %q", lora, err, msg)
			}
		}
	}
}

// TestLoadAdapterRefuses: an adapter for another base model, a file with a tensor missing or
// extra, and PEFT features onegpu does not compute are errors before anything is loaded.
func TestLoadAdapterRefuses(t *testing.T) {
	good, _ := readPeftFixture(t, "llama3_untied_lora")
	other, _ := readPeftFixture(t, "tied_bf16_sharded_lora")
	open := func() *hf.Pretrained {
		p, err := hf.Open(context.New(), testkit.ReadHFFixture(t, "llama3_untied").Dir, dtypes.Float32, 0)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	edited := func(edit func(map[string]any)) string {
		dir := t.TempDir()
		raw, err := os.ReadFile(filepath.Join(good, hf.AdapterConfigFile))
		if err != nil {
			t.Fatal(err)
		}
		var c map[string]any
		if err := json.Unmarshal(raw, &c); err != nil {
			t.Fatal(err)
		}
		edit(c)
		raw, _ = json.Marshal(c)
		if err := os.WriteFile(filepath.Join(dir, hf.AdapterConfigFile), raw, 0o644); err != nil {
			t.Fatal(err)
		}
		weights, err := os.ReadFile(filepath.Join(good, hf.AdapterWeightsFile))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, hf.AdapterWeightsFile), weights, 0o644); err != nil {
			t.Fatal(err)
		}
		return dir
	}
	for name, tc := range map[string]struct {
		dir, want string
	}{
		"another base": {other, "tensor base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight has shape [2 32], the model's adapter [2 64]"},
		"fewer targets": {edited(func(c map[string]any) { c["target_modules"] = []string{"q_proj"} }),
			"24 tensors are not adapters of this model under rank=4,alpha=8,targets=q_proj,rslora: base_model.model.model.layers.0.mlp.down_proj.lora_A.weight"},
		"more targets": {edited(func(c map[string]any) {
			c["r"] = 4
			c["target_modules"] = []string{"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj", "x_proj"}
		}),
			`target "x_proj" is not a projection`},
		"dora":  {edited(func(c map[string]any) { c["use_dora"] = true }), "use_dora is true"},
		"regex": {edited(func(c map[string]any) { c["target_modules"] = ".*proj" }), "target_modules is .*proj"},
		"ia3":   {edited(func(c map[string]any) { c["peft_type"] = "IA3" }), `peft_type "IA3": onegpu reads LORA adapters`},
		"ranks": {edited(func(c map[string]any) { c["rank_pattern"] = map[string]int{"q_proj": 8} }), "rank_pattern is map[q_proj:8]"},
	} {
		p := open()
		before := p.Ctx.NumVariables()
		_, err := hf.LoadAdapter(p.Ctx, tc.dir, p.Layout, dtypes.Float32)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want one saying %q", name, err, tc.want)
		}
		if p.Ctx.NumVariables() != before {
			t.Errorf("%s: the refused adapter created variables", name)
		}
	}
	p := open()
	if err := hf.ExportAdapter(p.Ctx, testkit.ReadHFFixture(t, "llama3_untied").Dir, p.Layout, layers.LoRA{Rank: 2}, hf.AdapterOptions{}); err == nil || !strings.Contains(err.Error(), "holds files onegpu did not export (config.json") {
		t.Errorf("exporting an adapter into a model's folder: %v", err)
	}
}

// TestPEFTLoadsExportedAdapter: peft loads an adapter onegpu exported on its base without missing
// or unexpected keys, and its loss on the base fixture's tokens equals onegpu's within 2e-4 (run
// where $ONEGPU_TRANSFORMERS_PYTHON names a Python with reference/hf/requirements.txt and
// requirements-peft.txt installed).
func TestPEFTLoadsExportedAdapter(t *testing.T) {
	if transformersPython() == "" {
		t.Skip("$ONEGPU_TRANSFORMERS_PYTHON is not set (a Python with torch, transformers and peft): peft's reading of an exported adapter is not checked")
	}
	adapter, _ := readPeftFixture(t, "llama3_untied_lora")
	base := testkit.ReadHFFixture(t, "llama3_untied")
	p, err := hf.Open(context.New(), base.Dir, dtypes.Float32, 0)
	if err != nil {
		t.Fatal(err)
	}
	lora, err := hf.LoadAdapter(p.Ctx, adapter, p.Layout, dtypes.Float32)
	if err != nil {
		t.Fatal(err)
	}
	for v := range p.Ctx.IterVariables() { // onegpu's own adapter values, not peft's
		if layers.IsAdapter(v) {
			values := tensors.MustCopyFlatData[float32](v.MustValue())
			for i := range values {
				values[i] = values[i]*1.5 - 0.01
			}
			if err := v.SetValue(tensors.FromFlatDataAndDimensions(values, v.Shape().Dimensions...)); err != nil {
				t.Fatal(err)
			}
		}
	}
	layers.SetLoRA(p.Ctx, lora)
	out := filepath.Join(t.TempDir(), "adapter")
	if err := hf.ExportAdapter(p.Ctx, out, p.Layout, lora, hf.AdapterOptions{Base: base.Dir}); err != nil {
		t.Fatal(err)
	}
	ours := base
	ours.Logits = logitsOf(t, testkit.Embedded(), p, base)
	want, count := ours.CrossEntropy()
	script := filepath.Join("..", "reference", "hf", "peft_fixture.py")
	raw, err := exec.Command(transformersPython(), script, "loss", base.Dir, out, base.Dir+".tokens.npy").Output()
	if err != nil {
		t.Fatalf("%s loss: %v\n%s", script, err, raw)
	}
	var report struct {
		Loss       float64  `json:"loss"`
		Tokens     int      `json:"tokens"`
		Missing    []string `json:"missing_keys"`
		Unexpected []string `json:"unexpected_keys"`
	}
	lines := strings.Split(strings.TrimSpace(string(raw)), "\n")
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &report); err != nil {
		t.Fatalf("report %q: %v", raw, err)
	}
	t.Logf("peft's loss %.7f, onegpu's %.7f over %d tokens (difference %.3g); missing keys %v, unexpected %v",
		report.Loss, want, count, report.Loss-want, report.Missing, report.Unexpected)
	if math.Abs(report.Loss-want) > 2e-4 || report.Tokens != count || len(report.Missing)+len(report.Unexpected) > 0 {
		t.Errorf("peft's loss %g over %d tokens (missing %v, unexpected %v), onegpu's %g over %d", report.Loss, report.Tokens, report.Missing, report.Unexpected, want, count)
	}
}
