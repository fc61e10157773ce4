package models_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/gomlx/gomlx/pkg/ml/context"

	"github.com/onegpu/onegpu/accum"
	"github.com/onegpu/onegpu/analysis"
	"github.com/onegpu/onegpu/internal/plainllama"
	"github.com/onegpu/onegpu/internal/testkit"
	"github.com/onegpu/onegpu/layers"
	"github.com/onegpu/onegpu/mixed"
	"github.com/onegpu/onegpu/models"
	"github.com/onegpu/onegpu/remat"
)

// TestLlamaPresetParameterCounts: the published presets of every Llama family count exactly the
// published parameters (the Llama's listed here, and each preset's as its description states it,
// "(N parameters)", taken from the model card), both by the config's formula and by the variables
// the model creates (shapes only: nothing is allocated, which is what lets an 8B model be counted
// on a small machine); and so does the tiny preset with q/k/v biases.
func TestLlamaPresetParameterCounts(t *testing.T) {
	published := map[string]int64{
		"tinyllama-1.1b": 1_100_048_384,
		"llama-3.2-1b":   1_235_814_400,
		"llama-3.1-8b":   8_030_261_248,
		"llama-3.1-70b":  70_553_706_496,
		"llama-3.3-70b":  70_553_706_496,
	}
	described := regexp.MustCompile(`\(([0-9,]+) parameters\)`)
	for _, key := range models.LlamaFamilyNames() {
		f, _ := models.LlamaFamilyOf(key)
		for _, name := range f.PresetNames() {
			config, err := f.Preset(name)
			if err != nil {
				t.Fatal(err)
			}
			if err := config.Validate(); err != nil {
				t.Errorf("%s %s: %v", key, name, err)
			}
			if m := described.FindStringSubmatch(config.Description); m != nil {
				want, _ := strconv.ParseInt(strings.ReplaceAll(m[1], ",", ""), 10, 64)
				if config.Params() != want {
					t.Errorf("%s %s: LlamaConfig.Params() = %d, its description says %d", key, name, config.Params(), want)
				}
			}
			if want := published[name]; key == "llama" && want != 0 && config.Params() != want {
				t.Errorf("%s: LlamaConfig.Params() = %d, want %d", name, config.Params(), want)
			}
			checkParamCount(t, key+" "+name, config)
		}
	}
	biased, _ := models.LlamaPreset("tiny")
	biased.QKVBias = true
	checkParamCount(t, "tiny with q/k/v biases", biased)
}

// checkParamCount checks that the Llama of config creates the parameters its config counts.
func checkParamCount(t *testing.T, name string, config models.LlamaConfig) {
	t.Helper()
	m, err := models.NewLlama(config)
	if err != nil {
		t.Fatal(err)
	}
	s, err := layers.Summarize(testkit.Embedded(), func(ctx *context.Context, g *graph.Graph) {
		m.Logits(ctx, graph.Parameter(g, "tokens", shapes.Make(dtypes.Int32, 1, 4)))
	})
	if err != nil {
		t.Fatal(err)
	}
	if s.Params != config.Params() {
		t.Errorf("%s: the model creates %d parameters, the config counts %d", name, s.Params, config.Params())
	}
}

// tinyLlama is a Llama small enough for float64 gradient checks, with grouped heads and Llama 3's
// rotary scaling.
func tinyLlama(tied bool) models.LlamaConfig {
	return models.LlamaConfig{Vocab: 40, Hidden: 16, Intermediate: 24, Layers: 2, Heads: 4, KVHeads: 2, HeadDim: 4,
		SeqLen: 9, MaxPositions: 64, RopeTheta: 10000, NormEpsilon: 1e-5, TiedEmbeddings: tied,
		RopeScaling: &models.RopeScaling{Factor: 4, LowFreqFactor: 1, HighFreqFactor: 4, OriginalMaxPositions: 16}}
}

func plainConfig(c models.LlamaConfig) plainllama.Config {
	p := plainllama.Config{Vocab: c.Vocab, Hidden: c.Hidden, Intermediate: c.Intermediate, Layers: c.Layers, Heads: c.Heads,
		KVHeads: c.KVHeads, HeadDim: c.HeadDim, Theta: c.RopeTheta, Eps: c.NormEpsilon, Tied: c.TiedEmbeddings, QKVBias: c.QKVBias}
	if s := c.RopeScaling; s != nil {
		p.Scaling = &plainllama.Scaling{Factor: s.Factor, Low: s.LowFreqFactor, High: s.HighFreqFactor, Original: s.OriginalMaxPositions}
	}
	return p
}

func randomTokens(seed uint64, vocab, batch, seq int) testkit.Input {
	rng := rand.New(rand.NewPCG(seed, 1))
	tokens := make([]int32, batch*seq)
	for i := range tokens {
		tokens[i] = int32(rng.IntN(vocab))
	}
	return testkit.Input{Ints: tokens, Dims: []int{batch, seq}}
}

// TestLlamaMatchesPlainFloat64: the whole Llama's logits in float64 equal an independent plain
// float64 implementation of Hugging Face's LlamaForCausalLM, its float64 gradients equal central
// differences of that implementation, and the gradients of every parameter computed in float32
// are within 1e-5 (relative L2) of the float64 ones; with tied and untied embeddings, and with
// q/k/v biases (Qwen2's attention).
func TestLlamaMatchesPlainFloat64(t *testing.T) {
	for _, v := range []struct{ tied, bias bool }{{true, false}, {false, false}, {true, true}} {
		tied, config := v.tied, tinyLlama(v.tied)
		config.QKVBias = v.bias
		const batch = 2
		tokens := randomTokens(9, config.Vocab, batch, config.SeqLen)
		check := testkit.PlainCheck{
			Inputs:  []testkit.Input{tokens},
			Perturb: 0.3, // norms away from ones, projections well above their 0.02 init
			Build: func(ctx *context.Context, compute dtypes.DType, in []*graph.Node) *graph.Node {
				m, err := models.NewLlama(config)
				if err != nil {
					panic(err)
				}
				mixed.SetPolicy(ctx, mixed.Policy{Param: dtypes.Float64, Compute: compute, Output: dtypes.Float64})
				m.SoftmaxDType = compute
				return m.Logits(ctx, in[0])
			},
			Plain: func(params map[string][]float64, in [][]float64) []float64 {
				ids := make([]int, len(in[0]))
				for i, v := range in[0] {
					ids[i] = int(v)
				}
				return plainllama.Logits(plainConfig(config), params, ids, batch, config.SeqLen)
			},
		}
		for _, backend := range testkit.All() {
			t.Run(fmt.Sprintf("tied %v bias %v/%s", tied, v.bias, backend.Name()), func(t *testing.T) { check.Run(t, backend) })
		}
	}
}

// llamaStep builds the loss of the Llama on tokens (labels: the tokens shifted by one) and the
// gradients of every parameter, with the remat kinds given.
func llamaStep(m models.Llama, policy mixed.Policy, kinds []string) func(ctx *context.Context, in []*graph.Node) []*graph.Node {
	return func(ctx *context.Context, in []*graph.Node) []*graph.Node {
		mixed.SetPolicy(ctx, policy)
		if len(kinds) > 0 {
			remat.SetBlocks(ctx, remat.With(remat.NothingSaveable), kinds...)
		}
		sum, count := m.CrossEntropy(ctx, in[0], in[1], nil)
		loss := graph.Div(sum, count)
		var wrt []*graph.Node
		for v := range ctx.IterVariables() {
			if v.Trainable {
				wrt = append(wrt, v.ValueGraph(loss.Graph()))
			}
		}
		return append([]*graph.Node{loss}, graph.Gradient(loss, wrt...)...)
	}
}

// runLlamaStep runs llamaStep on backend from the weights seed gives, and returns the loss and the
// gradients (flattened, in variable order).
func runLlamaStep(t *testing.T, backend backends.Backend, m models.Llama, policy mixed.Policy, kinds []string, tokens, labels testkit.Input) (float64, [][]float64) {
	t.Helper()
	ctx := context.New()
	if err := ctx.SetRNGStateFromSeed(3); err != nil {
		t.Fatal(err)
	}
	exec, err := context.NewExec(backend, ctx, llamaStep(m, policy, kinds))
	if err != nil {
		t.Fatal(err)
	}
	defer exec.Finalize()
	outs, err := exec.Exec(tensors.FromFlatDataAndDimensions(tokens.Ints, tokens.Dims...), tensors.FromFlatDataAndDimensions(labels.Ints, labels.Dims...))
	if err != nil {
		t.Fatal(err)
	}
	grads := make([][]float64, len(outs)-1)
	for i, o := range outs[1:] {
		grads[i] = testkit.Floats(o)
	}
	return testkit.Floats(outs[0])[0], grads
}

// TestLlamaBFloat16: under params=float32,compute=bfloat16,output=float32 the tiny preset's loss
// and gradients are within bfloat16's precision of float32's, its parameters and gradients are
// float32, its layers compute in bfloat16 and its logits are float32.
func TestLlamaBFloat16(t *testing.T) {
	config, _ := models.LlamaPreset("tiny")
	tokens, labels := randomTokens(1, config.Vocab, 4, config.SeqLen), randomTokens(2, config.Vocab, 4, config.SeqLen)
	bf16 := mixed.Policy{Param: dtypes.Float32, Compute: dtypes.BFloat16, Output: dtypes.Float32}
	for _, backend := range testkit.All() {
		m, _ := models.NewLlama(config)
		loss32, grads32 := runLlamaStep(t, backend, m, mixed.Float32, nil, tokens, labels)
		loss16, grads16 := runLlamaStep(t, backend, m, bf16, nil, tokens, labels)
		worst := 0.0
		for i := range grads32 {
			worst = max(worst, testkit.RelL2(grads16[i], grads32[i]))
		}
		t.Logf("%s: loss float32 %.6f, bfloat16 %.6f; worst gradient relative L2 %.3g", backend.Name(), loss32, loss16, worst)
		if math.Abs(loss16-loss32) > 1e-2*loss32 {
			t.Errorf("%s: bfloat16 loss %v, float32 %v: more than 1%% apart", backend.Name(), loss16, loss32)
		}
		if !(worst < 0.1) {
			t.Errorf("%s: a bfloat16 gradient differs from float32's by %.3g (relative L2)", backend.Name(), worst)
		}
	}
	m, _ := models.NewLlama(config)
	s, err := layers.Summarize(testkit.Embedded(), func(ctx *context.Context, g *graph.Graph) {
		mixed.SetPolicy(ctx, bf16)
		m.Logits(ctx, graph.Parameter(g, "tokens", shapes.Make(dtypes.Int32, 2, config.SeqLen)))
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range s.Rows {
		for _, p := range r.Params {
			if !strings.Contains(p.Shape, "(Float32)") {
				t.Errorf("parameter %s/%s is %s, want float32", r.Path, p.Name, p.Shape)
			}
		}
		want := "(BFloat16)"
		if r.Layer == "logits" {
			want = "(Float32)"
		}
		if !strings.Contains(r.Output, want) {
			t.Errorf("%s %s outputs %s, want %s", r.Path, r.Layer, r.Output, want)
		}
	}
}

// TestLlamaRematKinds: rematerializing the blocks "attn", "mlp", both, or "block" leaves the loss
// and every gradient bit for bit as they are, and lowers the step's activations at its peak
// (onegpu's estimate of the embedded backend's sequential execution). With an XLA plugin, XLA's
// compiled temporaries drop too: XLA did not merge the recomputation back into the forward pass.
func TestLlamaRematKinds(t *testing.T) {
	config, _ := models.LlamaPreset("tiny")
	config.Layers = 4
	const batch = 8
	tokens, labels := randomTokens(1, config.Vocab, batch, config.SeqLen), randomTokens(2, config.Vocab, batch, config.SeqLen)
	m, _ := models.NewLlama(config)
	kinds := [][]string{nil, {"attn"}, {"mlp"}, {"attn", "mlp"}, {"block"}}
	inputs := []shapes.Shape{shapes.Make(dtypes.Int32, batch, config.SeqLen), shapes.Make(dtypes.Int32, batch, config.SeqLen)}
	activations := map[string]int64{}
	var loss0 float64
	var grads0 [][]float64
	for _, k := range kinds {
		name := strings.Join(k, ",")
		if name == "" {
			name = "none"
		}
		p, err := analysis.ContextProgram(testkit.Embedded(), context.New(), "llama", inputs, llamaStep(m, mixed.Float32, k))
		if err != nil {
			t.Fatal(err)
		}
		activations[name] = analysis.Analyze(p).Breakdown[analysis.Activations]
		p.Graph.Finalize()
		loss, grads := runLlamaStep(t, testkit.Embedded(), m, mixed.Float32, k, tokens, labels)
		if k == nil {
			loss0, grads0 = loss, grads
			continue
		}
		if loss != loss0 {
			t.Errorf("remat %s: loss %v, without remat %v", name, loss, loss0)
		}
		for i := range grads {
			if d := testkit.RelL2(grads[i], grads0[i]); d != 0 {
				t.Errorf("remat %s: gradient #%d differs from the one without remat by %.3g", name, i, d)
			}
		}
		if activations[name] >= activations["none"] {
			t.Errorf("remat %s: activations at the peak %d bytes, without remat %d", name, activations[name], activations["none"])
		}
	}
	t.Logf("activations at the step's peak (embedded backend, sequential): %v", activations)
	xla := testkit.XLA()
	if xla == nil {
		return
	}
	temporaries := map[string]int64{}
	for _, k := range [][]string{nil, {"block"}} {
		p, err := analysis.ContextProgram(xla, context.New(), "llama", inputs, llamaStep(m, mixed.Float32, k))
		if err != nil {
			t.Fatal(err)
		}
		compiled, err := analysis.CompileProgram(p)
		if err != nil {
			t.Fatal(err)
		}
		temporaries[strings.Join(k, ",")] = compiled.TemporaryBytes
		p.Graph.Finalize()
	}
	t.Logf("XLA temporary bytes: none %d, block %d", temporaries[""], temporaries["block"])
	if float64(temporaries["block"]) > 0.7*float64(temporaries[""]) {
		t.Errorf("remat block keeps %d temporary bytes on XLA, none %d: XLA merged the recomputation back?", temporaries["block"], temporaries[""])
	}
}

// TestLlamaConfigErrors: Validate names the field that cannot work.
func TestLlamaConfigErrors(t *testing.T) {
	base, _ := models.LlamaPreset("tiny")
	for _, tc := range []struct {
		change func(c *models.LlamaConfig)
		want   string
	}{
		{func(c *models.LlamaConfig) { c.KVHeads = 3 }, "KVHeads = 3 does not divide Heads = 4"},
		{func(c *models.LlamaConfig) { c.HeadDim = 15 }, "HeadDim = 15 must be even"},
		{func(c *models.LlamaConfig) { c.Layers = 0 }, "Layers = 0 must be at least 1"},
		{func(c *models.LlamaConfig) { c.SeqLen = 300 }, "SeqLen = 300 exceeds MaxPositions = 256"},
		{func(c *models.LlamaConfig) { c.RopeTheta = math.NaN() }, "RopeTheta = NaN"},
		{func(c *models.LlamaConfig) { c.NormEpsilon = 0 }, "NormEpsilon = 0"},
		{func(c *models.LlamaConfig) { c.RopeScaling.HighFreqFactor = 0.5 }, "RopeScaling: rotary embeddings: llama3 scaling needs 0 < low_freq_factor < high_freq_factor"},
		{func(c *models.LlamaConfig) { c.Vocab, c.Hidden = 1<<30, 1<<20 }, "the parameter count would be"},
	} {
		c, _ := models.LlamaPreset("tiny")
		tc.change(&c)
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Validate() = %v, want an error containing %q", err, tc.want)
		}
	}
	if base.RopeScaling.HighFreqFactor != 4 {
		t.Errorf("changing a preset's copy changed the table (RopeScaling is shared)")
	}
	if _, err := models.LlamaPreset("llama-4"); err == nil || !strings.Contains(err.Error(), "tinyllama-1.1b") {
		t.Errorf("LlamaPreset(llama-4) = %v, want an error listing the presets", err)
	}
}

// TestLlamaMicroBatchesOnXLA: on XLA, 4 serialized micro-batches of a bfloat16 Llama step (remat of
// attention and MLP) need at most half the temporaries of one batch: XLA neither interleaves the
// unrolled micro-batches nor merges their values (the ties of accum and of the layers hold).
// Measured: 369 MB for one batch of 32, 102 MB for four of 8 (0.28x).
func TestLlamaMicroBatchesOnXLA(t *testing.T) {
	xla := testkit.RequireXLA(t)
	if testing.Short() {
		t.Skip("compiles two steps of a mid-sized Llama (about a minute)")
	}
	config := models.LlamaConfig{Vocab: 2048, Hidden: 512, Intermediate: 1536, Layers: 2, Heads: 8, KVHeads: 4, HeadDim: 64,
		SeqLen: 256, MaxPositions: 256, RopeTheta: 10000, NormEpsilon: 1e-5}
	m, err := models.NewLlama(config)
	if err != nil {
		t.Fatal(err)
	}
	const batch = 32
	temporaries := map[int]int64{}
	for _, k := range []int{1, 4} {
		in := []shapes.Shape{shapes.Make(dtypes.Int32, batch, config.SeqLen), shapes.Make(dtypes.Int32, batch, config.SeqLen)}
		p, err := analysis.ContextProgram(xla, context.New(), "llama", in, func(ctx *context.Context, in []*graph.Node) []*graph.Node {
			mixed.SetPolicy(ctx, mixed.Policy{Param: dtypes.Float32, Compute: dtypes.BFloat16, Output: dtypes.Float32})
			remat.SetBlocks(ctx, remat.With(remat.NothingSaveable), "attn", "mlp")
			r := accum.Gradients(ctx, k, in, func(ctx *context.Context, batch []*graph.Node) (accum.Mean, []accum.Mean) {
				sum, count := m.CrossEntropy(ctx, batch[0], batch[1], nil)
				return accum.Mean{Sum: sum, Count: count}, nil
			})
			return append([]*graph.Node{r.Loss}, r.Gradients...)
		})
		if err != nil {
			t.Fatal(err)
		}
		compiled, err := analysis.CompileProgram(p)
		p.Graph.Finalize()
		if err != nil {
			t.Fatal(err)
		}
		temporaries[k] = compiled.TemporaryBytes
	}
	ratio := float64(temporaries[4]) / float64(temporaries[1])
	t.Logf("XLA temporary bytes: 1 micro-batch %d, 4 micro-batches %d (%.2fx)", temporaries[1], temporaries[4], ratio)
	if ratio > 0.5 {
		t.Errorf("4 micro-batches keep %.2fx the temporaries of one batch, want at most 0.5x: XLA shares buffers across the unrolled micro-batches?", ratio)
	}
}

// TestLlamaFamilies: each registered family's presets are named by String with the family's name
// and the preset ("Llama tiny (...", "Qwen2 qwen2.5-0.5b (..."), an unknown preset is an error
// listing the family's, and a family key is registered once.
func TestLlamaFamilies(t *testing.T) {
	for _, key := range models.LlamaFamilyNames() {
		f, _ := models.LlamaFamilyOf(key)
		for _, name := range f.PresetNames() {
			c, _ := f.Preset(name)
			if s := (models.Llama{Config: c}).String(); !strings.HasPrefix(s, f.Name+" ") || !strings.Contains(s, " "+name+" ") {
				t.Errorf("%s %s: String() = %q", key, name, s)
			}
		}
		if _, err := f.Preset("no-such"); err == nil || !strings.Contains(err.Error(), `unknown `+f.Name+` preset "no-such": the presets are `) {
			t.Errorf("%s: %v", key, err)
		}
	}
	testkit.MustPanic(t, "empty or taken", func() {
		models.RegisterLlamaFamily("llama", models.LlamaFamily{Name: "Again", Presets: models.LlamaPresets})
	})
}
