package train_test

import (
	"bytes"
	"fmt"
	"strings"
	"testing"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/gomlx/gomlx/pkg/ml/context"

	"github.com/onegpu/onegpu/analysis"
	"github.com/onegpu/onegpu/hf"
	"github.com/onegpu/onegpu/internal/testkit"
	"github.com/onegpu/onegpu/layers"
	"github.com/onegpu/onegpu/mixed"
	"github.com/onegpu/onegpu/optim"
	"github.com/onegpu/onegpu/quant"
	"github.com/onegpu/onegpu/train"
)

// The base's SHA-256 of the Llama fixture (hf/testdata/llama3_untied) in float32 and bfloat16,
// as checkpoints written before SetBase recorded it (onegpu train --init-hf ... --lora
// rank=4,alpha=8,targets=q,k,v,o,gate,up,down --quantize-base nf4 --base-dtype D at 01105d0):
// checkpoints made either way resume on the other.
var fixtureBaseSHA256 = map[dtypes.DType]string{
	dtypes.Float32:  "7d4952ba65396b67e7c3ee1c2febeea28bb343e676a1139ae0e202aee2d244e0",
	dtypes.BFloat16: "4df56274b94943d476f76ea6fbea7567acf8345b605f2e9d7ce82c31823b2909",
}

// TestBaseQuantizedAsLoaded: a base hashed and quantized as it is read (SetBase with hf.OpenWith's
// sink) is the base loaded whole then made at the first step (SetWeights with hf.Open, then
// Initialize), bit for bit: the same hash (the fixture's as checkpoints recorded it before), the
// same variables with the same bytes and roles (quantized parts, kept weights, adapters), on every
// committed fixture, with NF4, int8 or no quantization and a float32 or bfloat16 base. No float
// copy of a quantized weight is ever a variable.
func TestBaseQuantizedAsLoaded(t *testing.T) {
	type variable struct {
		shape string
		role  analysis.Role
		bytes []byte
	}
	snapshot := func(tr *train.Trainer) map[string]variable {
		out := map[string]variable{}
		for v := range tr.Ctx.IterVariables() {
			var b []byte
			if err := v.MustValue().ConstBytes(func(data []byte) { b = bytes.Clone(data) }); err != nil {
				t.Fatal(err)
			}
			out[v.ScopeAndName()] = variable{v.Shape().String(), analysis.VariableRole(tr.Ctx, v), b}
		}
		return out
	}
	for _, name := range testkit.HFFixtureNames(t) {
		fx := testkit.ReadHFFixture(t, name)
		layout, err := hf.ReadConfig(fx.Dir, fx.Seq)
		if err != nil {
			t.Fatal(err)
		}
		for _, q := range []quant.Config{quant.QLoRA(), quant.Default(quant.Int8), {}} {
			for _, dtype := range []dtypes.DType{dtypes.Float32, dtypes.BFloat16} {
				if name != "llama3_untied" && (q.Format != quant.NF4 || dtype != dtypes.BFloat16) {
					continue // the other fixtures once each: QLoRA of a bfloat16 base
				}
				what := fmt.Sprintf("%s %s base, %q", name, dtype, q.Format)
				config := train.Config{Model: layout.Model().(train.Model), Batch: fx.Batch, Policy: mixed.Float32,
					Schedule: optim.Constant(1e-3), Seed: 3, BaseDType: dtype,
					LoRA: layers.LoRA{Rank: 2, Alpha: 4, Targets: []string{"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"}, Quantize: q}.Resolved()}
				whole, err := train.New(testkit.Embedded(), config)
				if err != nil {
					t.Fatal(err)
				}
				defer whole.Close()
				if err := whole.SetWeights(func(ctx *context.Context) error {
					_, err := hf.Open(ctx, fx.Dir, dtype, fx.Seq)
					return err
				}); err != nil {
					t.Fatal(err)
				}
				asLoaded, err := train.New(testkit.Embedded(), config)
				if err != nil {
					t.Fatal(err)
				}
				defer asLoaded.Close()
				floats := 0 // float weights of targeted projections made as variables
				if err := asLoaded.SetBase("", func(ctx *context.Context, b *train.BaseWeights) error {
					_, err := hf.OpenWith(ctx, fx.Dir, hf.Options{DType: dtype, Seq: fx.Seq, Sink: countingSink{b, ctx, config.LoRA, &floats}})
					return err
				}); err != nil {
					t.Fatal(err)
				}
				for _, tr := range []*train.Trainer{whole, asLoaded} {
					if err := tr.Initialize(); err != nil {
						t.Fatal(err)
					}
				}
				if whole.BaseSHA256() != asLoaded.BaseSHA256() || len(whole.BaseSHA256()) != 64 {
					t.Errorf("%s: base sha256 %q loaded whole, %q as loaded", what, whole.BaseSHA256(), asLoaded.BaseSHA256())
				}
				if want := fixtureBaseSHA256[dtype]; name == "llama3_untied" && q.Format == quant.NF4 && asLoaded.BaseSHA256() != want {
					t.Errorf("%s: base sha256 %s, checkpoints recorded %s", what, asLoaded.BaseSHA256(), want)
				}
				if q.Format != "" && floats > 0 {
					t.Errorf("%s: %d targeted weights were made as float variables before being quantized", what, floats)
				}
				a, b := snapshot(whole), snapshot(asLoaded)
				quantized := 0
				for n, va := range a {
					vb, ok := b[n]
					switch {
					case !ok:
						t.Errorf("%s: %s (%s) loaded whole, missing as loaded", what, n, va.shape)
					case va.shape != vb.shape || va.role != vb.role || !bytes.Equal(va.bytes, vb.bytes):
						t.Errorf("%s: %s loaded whole %s %s, as loaded %s %s (bytes equal %v)", what, n, va.shape, va.role, vb.shape, vb.role, bytes.Equal(va.bytes, vb.bytes))
					}
					if strings.Contains(n, "/"+layers.QuantizedScope+"/") {
						quantized++
					}
				}
				for n := range b {
					if _, ok := a[n]; !ok {
						t.Errorf("%s: %s as loaded, not loaded whole", what, n)
					}
				}
				if (q.Format != "") != (quantized > 0) {
					t.Errorf("%s: %d quantized parts", what, quantized)
				}
			}
		}
	}
}

// countingSink is a BaseWeights that counts the float weights of quantized targets set as variables.
type countingSink struct {
	*train.BaseWeights
	ctx    *context.Context
	lora   layers.LoRA
	floats *int
}

func (s countingSink) Add(scope *context.Context, name string, value *tensors.Tensor) error {
	if s.lora.Quantizes(scope, name, value.Shape()) && scope.GetVariableByScopeAndName(scope.Scope(), name) != nil {
		*s.floats++
	}
	return s.BaseWeights.Add(scope, name, value)
}

// TestSetBaseRefuses: SetBase without LoRA, weights given out of their names' order, a weight set
// without going through the sink, a QLoRA base without a targeted weight, a sink that takes a
// weight the context holds already, and SetWeights after the base is made: each an error saying so.
func TestSetBaseRefuses(t *testing.T) {
	fx := testkit.ReadHFFixture(t, "llama3_untied")
	layout, err := hf.ReadConfig(fx.Dir, fx.Seq)
	if err != nil {
		t.Fatal(err)
	}
	config := train.Config{Model: layout.Model().(train.Model), Batch: fx.Batch, Policy: mixed.Float32, Schedule: optim.Constant(1e-3), Seed: 3}
	lora := layers.LoRA{Rank: 2, Targets: []string{"q_proj"}, Quantize: quant.QLoRA()}
	value := tensors.FromValue([][]float32{{1, 2}, {3, 4}})
	for _, tc := range []struct {
		name string
		lora layers.LoRA
		load func(ctx *context.Context, b *train.BaseWeights) error
		want string
	}{
		{"no lora", layers.LoRA{}, nil, "Config.LoRA is not set"},
		{"order", lora, func(ctx *context.Context, b *train.BaseWeights) error {
			if err := b.Add(ctx.In("b"), "weight", value); err != nil {
				return err
			}
			return b.Add(ctx.In("a"), "weight", value)
		}, "weight /a/weight comes after /b/weight"},
		{"bypassed", lora, func(ctx *context.Context, b *train.BaseWeights) error {
			ctx.In("a").VariableWithValue("weight", value)
			return nil
		}, "set the weight /a/weight without giving it to BaseWeights.Add"},
		{"nothing quantized", lora, func(ctx *context.Context, b *train.BaseWeights) error {
			return b.Add(ctx.In("a"), "weight", value)
		}, "Config.LoRA.Quantize: the model has no weight of the targets q_proj to quantize"},
		{"held already", lora, func(ctx *context.Context, b *train.BaseWeights) error {
			ctx.In("model").In("layers").In("0").In("self_attn").In("q_proj").VariableWithShape("weight", shapes.Make(dtypes.Float32, 64, 64))
			_, err := hf.OpenWith(ctx, fx.Dir, hf.Options{DType: dtypes.Float32, Seq: fx.Seq, Sink: b})
			return err
		}, "the weights' sink takes model.layers.0.self_attn.q_proj.weight instead of a variable"},
	} {
		c := config
		c.LoRA = tc.lora
		tr, err := train.New(testkit.Embedded(), c)
		if err != nil {
			t.Fatal(err)
		}
		err = tr.SetBase("", tc.load)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error saying %q", tc.name, err, tc.want)
		}
		tr.Close()
	}
	c := config
	c.LoRA = lora
	tr, err := train.New(testkit.Embedded(), c)
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	if err := tr.SetBase("the fixture", func(ctx *context.Context, b *train.BaseWeights) error {
		_, err := hf.OpenWith(ctx, fx.Dir, hf.Options{DType: dtypes.Float32, Seq: fx.Seq, Sink: b})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if err := tr.SetWeights(func(*context.Context) error { return nil }); err == nil || !strings.Contains(err.Error(), "base was made already (by SetBase, Initialize or Run, from the fixture)") {
		t.Errorf("SetWeights after SetBase: %v", err)
	}
}
