package train_test

import (
	"errors"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/gomlx/gomlx/pkg/ml/context"

	"github.com/onegpu/onegpu/analysis"
	"github.com/onegpu/onegpu/data"
	"github.com/onegpu/onegpu/internal/testkit"
	"github.com/onegpu/onegpu/layers"
	"github.com/onegpu/onegpu/quant"
	"github.com/onegpu/onegpu/train"
	"github.com/onegpu/onegpu/train/checkpoint"
)

// TestLoRACheckpointHoldsTheAdaptersOnly: a LoRA run's checkpoints (and a QLoRA run's) hold the
// adapters, their Adam moments and the counters, no weight of the frozen base, and record the
// base's SHA-256 and its source; a run resumed from them (the base made again from the seed, and
// quantized again) takes the steps of an uninterrupted run bit for bit; a resume on another base
// is refused, naming both hashes, before anything is loaded; train.Load, which has no base to
// give, refuses them saying so.
func TestLoRACheckpointHoldsTheAdaptersOnly(t *testing.T) {
	for name, q := range map[string]quant.Config{"lora": {}, "qlora": quant.QLoRA()} {
		config := llamaReference(t)
		config.Batch = 4
		config.LoRA = layers.LoRA{Rank: 2, Alpha: 4, Targets: []string{"q_proj", "v_proj", "down_proj"}, Quantize: q}
		seq, _ := config.Model.(train.LanguageModel).TokenShape()
		batches, err := data.NewText(data.Corpus, config.Batch, seq, 2)
		if err != nil {
			t.Fatal(err)
		}
		run := func(dir string, steps int, base func(ctx *context.Context) error) ([]train.StepMetrics, error) {
			tr, err := train.New(testkit.Embedded(), config)
			if err != nil {
				t.Fatal(err)
			}
			defer tr.Close()
			if base != nil {
				if err := tr.SetWeights(base); err != nil {
					t.Fatal(err)
				}
			}
			h, err := tr.Run(batches, train.RunOptions{Steps: steps, CheckpointDir: dir})
			if h == nil {
				return nil, err
			}
			return h.Steps, err
		}
		straight, err := run(filepath.Join(t.TempDir(), "straight"), 4, nil)
		if err != nil {
			t.Fatal(err)
		}
		dir := filepath.Join(t.TempDir(), "resumed")
		first, err := run(dir, 2, nil)
		if err != nil {
			t.Fatal(err)
		}
		folder, err := checkpoint.OpenReadOnly(dir)
		if err != nil {
			t.Fatal(err)
		}
		held, err := folder.Variables()
		if err != nil {
			t.Fatal(err)
		}
		adapters := 0
		for v := range held {
			switch {
			case strings.HasSuffix(v, "/lora_A/weight") || strings.HasSuffix(v, "/lora_B/weight"):
				adapters++
			case strings.HasSuffix(v, "weight") || strings.Contains(v, "/"+layers.QuantizedScope+"/"):
				t.Errorf("%s: the checkpoint holds %s, a weight of the frozen base", name, v)
			}
		}
		w := folder.Written()
		if adapters != 2*3*2 || len(w.BaseSHA256) != 64 || w.BaseFrom != "the seed 11" || !strings.HasPrefix(w.Adapters, "lora rank=2") {
			t.Errorf("%s: %d adapters held (want 12); the manifest records base %q from %q, adapters %q", name, adapters, w.BaseSHA256, w.BaseFrom, w.Adapters)
		}
		if _, err := loadEmbedded(t, dir); err == nil || !strings.Contains(err.Error(), "trained on a frozen base it does not store (sha256 "+w.BaseSHA256) {
			t.Errorf("%s: train.Load of adapters without their base: %v, want an error saying so", name, err)
		}
		second, err := run(dir, 4, nil)
		if err != nil {
			t.Fatal(err)
		}
		if resumed := append(first, second...); !reflect.DeepEqual(straight, resumed) {
			t.Errorf("%s: uninterrupted %+v\nresumed %+v", name, straight, resumed)
		}

		// Another base: the seed 12's weights given with SetWeights.
		other := config
		other.Seed, other.LoRA.Quantize = 12, quant.Config{}
		tr, err := train.New(testkit.Embedded(), other)
		if err != nil {
			t.Fatal(err)
		}
		if err := tr.Initialize(); err != nil {
			t.Fatal(err)
		}
		before := files(t, dir)
		_, err = run(dir, 6, func(ctx *context.Context) error {
			for v := range tr.Ctx.IterVariables() {
				if analysis.IsFrozen(tr.Ctx, v) {
					ctx.InAbsPath(v.Scope()).VariableWithValue(v.Name(), v.MustValue())
				}
			}
			return nil
		})
		tr.Close()
		var mismatch *checkpoint.BaseMismatchError
		if !errors.As(err, &mismatch) || mismatch.WrittenSHA256 != w.BaseSHA256 || mismatch.AskedSHA256 == w.BaseSHA256 ||
			!strings.Contains(err.Error(), "this checkpoint's is sha256 "+w.BaseSHA256+" (the seed 11)") ||
			!strings.Contains(err.Error(), "(weights set by SetWeights)") {
			t.Errorf("%s: resuming on another base: %v, want a *checkpoint.BaseMismatchError naming both", name, err)
		}
		if after := files(t, dir); !reflect.DeepEqual(before, after) {
			t.Errorf("%s: the refused resume changed the folder", name)
		}
	}
}
