package models_test

import (
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/gomlx/gomlx/pkg/ml/context"

	"github.com/onegpu/onegpu/internal/testkit"
	"github.com/onegpu/onegpu/layers"
	"github.com/onegpu/onegpu/mixed"
	"github.com/onegpu/onegpu/models"
	"github.com/onegpu/onegpu/remat"
)

// embedded is the embedded backend in sequential mode, shared by the tests.
var embedded = testkit.Embedded

func gptSummary(t *testing.T, config models.GPTConfig, policy string) *layers.Summary {
	t.Helper()
	p, err := mixed.ParsePolicy(policy)
	if err != nil {
		t.Fatal(err)
	}
	m, err := models.NewGPT(config)
	if err != nil {
		t.Fatal(err)
	}
	s, err := layers.Summarize(embedded(), func(ctx *context.Context, g *graph.Graph) {
		mixed.SetPolicy(ctx, p)
		m.Logits(ctx, graph.Parameter(g, "tokens", shapes.Make(dtypes.Int32, 2, config.SeqLen)))
	})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestTutorialParameterCount: the tutorial preset has exactly the tutorial's 155,877,376
// parameters, counted from the variables the model creates (and from the config's formula).
func TestTutorialParameterCount(t *testing.T) {
	const want = 155_877_376
	config := models.Presets["tutorial"]
	if got := config.Params(); got != want {
		t.Errorf("GPTConfig.Params() = %d, want %d", got, want)
	}
	s := gptSummary(t, config, "params=float32,compute=bfloat16")
	if s.Params != want {
		t.Errorf("the model creates %d parameters, want %d", s.Params, want)
	}
	if s.ParamBytes != 4*want {
		t.Errorf("parameters take %d bytes, want %d (float32)", s.ParamBytes, 4*want)
	}
}

// TestLayerDTypes: under params=float32,compute=bfloat16,output=float32 parameters are float32,
// layer outputs (the attention's included: its float32 softmax is cast back) bfloat16 and the
// logits float32.
func TestLayerDTypes(t *testing.T) {
	config := models.Presets["tiny"]
	for _, tc := range []struct {
		policy                 string
		param, compute, output string
	}{
		{"params=float32,compute=bfloat16,output=float32", "Float32", "BFloat16", "Float32"},
		{"float32", "Float32", "Float32", "Float32"},
	} {
		s := gptSummary(t, config, tc.policy)
		for _, r := range s.Rows {
			for _, p := range r.Params {
				if !strings.Contains(p.Shape, "("+tc.param+")") {
					t.Errorf("%s: parameter %s/%s is %s, want %s", tc.policy, r.Path, p.Name, p.Shape, tc.param)
				}
			}
			want := tc.compute
			switch r.Layer {
			case "Param":
				continue
			case "logits":
				want = tc.output
			}
			if !strings.Contains(r.Output, "("+want+")") {
				t.Errorf("%s: %s %s outputs %s, want %s", tc.policy, r.Path, r.Layer, r.Output, want)
			}
		}
	}
}

func TestGPTConfigErrors(t *testing.T) {
	base := models.Presets["tiny"]
	for _, tc := range []struct {
		change func(c *models.GPTConfig)
		want   string
	}{
		{func(c *models.GPTConfig) { c.HeadDim = 48 }, "HeadDim = 48 does not divide Hidden = 64"},
		{func(c *models.GPTConfig) { c.Layers = 0 }, "Layers = 0 must be at least 1"},
		{func(c *models.GPTConfig) { c.Dropout = 1 }, "Dropout = 1 must be in [0, 1)"},
	} {
		c := base
		tc.change(&c)
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Validate() = %v, want an error containing %q", err, tc.want)
		}
	}
	if _, err := models.Preset("huge"); err == nil || !strings.Contains(err.Error(), "tiny") {
		t.Errorf("Preset(huge) = %v, want an error listing the presets", err)
	}
}

// TestGPTConfigRefusesWhatCannotWork: the zero config has no heads (not a division by zero), and
// Validate names NaN dropouts and sizes whose counts overflow.
func TestGPTConfigRefusesWhatCannotWork(t *testing.T) {
	if got := (models.GPTConfig{}).Heads(); got != 0 {
		t.Errorf("GPTConfig{}.Heads() = %d, want 0", got)
	}
	if err := (models.GPTConfig{}).Validate(); err == nil || !strings.Contains(err.Error(), "Hidden = 0") {
		t.Errorf("GPTConfig{}.Validate() = %v", err)
	}
	huge := models.Presets["tiny"]
	huge.Hidden, huge.HeadDim, huge.Layers = 1<<20, 1<<10, 1<<20 // 2^20 layers of 12·2^40 weights: past int64's 2^63
	if float64(huge.Params()) == float64(huge.Layers)*12*float64(huge.Hidden)*float64(huge.Hidden) {
		t.Fatalf("the test's sizes do not overflow int64")
	}
	if err := huge.Validate(); err == nil || !strings.Contains(err.Error(), "the parameter count would be") {
		t.Errorf("sizes whose parameter count overflows: %v", err)
	}
	for _, bad := range []models.ClassifierConfig{
		{Inputs: 4, Hidden: 4, Classes: 2, Dropout: math.NaN()},
		{Inputs: 4, Hidden: 4, Classes: 1},
		{Inputs: 1 << 40, Hidden: 1 << 20, Classes: 2},
	} {
		if err := bad.Validate(); err == nil {
			t.Errorf("ClassifierConfig%+v.Validate() accepted it", bad)
		}
	}
	if err := models.TutorialClassifier.Validate(); err != nil {
		t.Error(err)
	}
	nan := models.Presets["tiny"]
	nan.Dropout = math.NaN()
	if err := nan.Validate(); err == nil || !strings.Contains(err.Error(), "Dropout = NaN") {
		t.Errorf("NaN dropout: %v", err)
	}
	tiny := models.Presets["tiny"]
	for _, tc := range []struct {
		batch, micro int
		want         string
	}{{1 << 41, 4, "a batch of tokens"}, {8, 1 << 36, "logits"}} {
		if err := tiny.ValidateBatch(tc.batch, tc.micro); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ValidateBatch(%d, %d) = %v, want an error about %s", tc.batch, tc.micro, err, tc.want)
		}
	}
	if err := tiny.ValidateBatch(16, 4); err != nil {
		t.Errorf("ValidateBatch(16, 4): %v", err)
	}
}

// TestGPTMarksItsBlocks: the GPT's step builds remat blocks of the kinds it declares, so a
// trainer can check the kinds a run asks for against the graph.
func TestGPTMarksItsBlocks(t *testing.T) {
	m, err := models.NewGPT(models.Presets["tiny"])
	if err != nil {
		t.Fatal(err)
	}
	g := graph.NewGraph(embedded(), "kinds")
	defer g.Finalize()
	tokens := graph.Parameter(g, "tokens", shapes.Make(dtypes.Int32, 2, 8))
	m.Loss(context.New(), []*graph.Node{tokens, tokens})
	if got, want := remat.BlockKinds(g), []string{"attn", "block", "mlp"}; !slices.Equal(got, want) {
		t.Errorf("BlockKinds = %v, want %v", got, want)
	}
	if got := m.RematKinds(); len(got) != 3 {
		t.Errorf("RematKinds = %v", got)
	}
	if err := remat.MissingKinds(g, []string{"mpl"}); err == nil || !strings.Contains(err.Error(), "its kinds are attn, block, mlp") {
		t.Errorf("a misspelt kind: %v", err)
	}
}
