package export_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/onegpu/onegpu/data"
	"github.com/onegpu/onegpu/mixed"
	"github.com/onegpu/onegpu/models"
	"github.com/onegpu/onegpu/optim"
	"github.com/onegpu/onegpu/train"
	"github.com/onegpu/onegpu/train/export"
)

// TestExportLlama: the Llama's shape is written by Hugging Face's config.json keys (what
// reference/jax/models.py's llama_config reads) and its parameters by their Hugging Face paths,
// the tied preset without lm_head.
func TestExportLlama(t *testing.T) {
	c, err := models.LlamaPreset("tiny")
	if err != nil {
		t.Fatal(err)
	}
	m, _ := models.NewLlama(c)
	tr, err := train.New(embedded(), train.Config{Model: m, Batch: 2, Policy: mixed.Float32, Schedule: optim.Constant(1e-3)})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	if err := tr.Initialize(); err != nil {
		t.Fatal(err)
	}
	batches, err := data.NewSyntheticTokens(2, c.SeqLen, c.Vocab, 1)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if _, err := export.Write(tr, dir, batches, 2); err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(filepath.Join(dir, "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	var back struct {
		Model  string         `json:"model"`
		Llama  map[string]any `json:"llama"`
		Params []struct {
			Path  string `json:"path"`
			Shape []int  `json:"shape"`
		} `json:"params"`
	}
	if err := json.Unmarshal(raw, &back); err != nil {
		t.Fatal(err)
	}
	scaling, _ := back.Llama["rope_scaling"].(map[string]any)
	if back.Model != "llama" || back.Llama["num_key_value_heads"] != 2.0 || back.Llama["head_dim"] != 16.0 || back.Llama["tie_word_embeddings"] != true ||
		scaling["rope_type"] != "llama3" || scaling["factor"] != 4.0 || back.Llama["rope_theta"] != 10000.0 {
		t.Errorf("config.json: model %q, llama %v", back.Model, back.Llama)
	}
	var paths []string
	for _, p := range back.Params {
		paths = append(paths, p.Path)
		if p.Path == "model/embed_tokens/weight" && !slices.Equal(p.Shape, []int{256, 64}) {
			t.Errorf("%s: shape %v, want [256 64]", p.Path, p.Shape)
		}
	}
	if !slices.Contains(paths, "model/layers/1/self_attn/k_proj/weight") || !slices.Contains(paths, "model/norm/weight") || slices.Contains(paths, "lm_head/weight") {
		t.Errorf("exported parameters %v: want Hugging Face's paths, no lm_head with tied embeddings", paths)
	}
}
