package train_test

import (
	"testing"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/ml/context"

	"github.com/onegpu/onegpu/internal/testkit"
	"github.com/onegpu/onegpu/layers"
	"github.com/onegpu/onegpu/mixed"
	"github.com/onegpu/onegpu/train"
)

// TestSettingsApply: what Apply sets is what the layers read back from the context, and a run's
// Config.Settings are its policy, remat, attention and cross-entropy in training mode.
func TestSettingsApply(t *testing.T) {
	bf16 := mixed.Policy{Param: dtypes.Float32, Compute: dtypes.BFloat16, Output: dtypes.Float32}
	config := train.Config{Policy: bf16, Remat: train.Remat{Kinds: []string{"mlp"}}, Attention: layers.Attention{Chunked: true, Block: 16},
		CrossEntropy: layers.CrossEntropy{Chunk: 32}}
	want := train.Settings{Training: true, Policy: bf16, Remat: config.Remat, Attention: config.Attention, CrossEntropy: config.CrossEntropy}
	got := config.Settings()
	if got.Training != want.Training || got.Policy != want.Policy || got.Remat.String() != want.Remat.String() ||
		got.Attention != want.Attention || got.CrossEntropy != want.CrossEntropy {
		t.Fatalf("Config.Settings() = %+v, want %+v", got, want)
	}
	for _, s := range []train.Settings{want, {Policy: mixed.Float32}} {
		ctx := context.New()
		g := graph.NewGraph(testkit.Embedded(), "settings")
		s.Apply(ctx, g)
		if ctx.IsTraining(g) != s.Training || mixed.PolicyOf(ctx.In("deeper")) != s.Policy ||
			layers.AttentionOf(ctx.In("deeper")) != s.Attention || layers.CrossEntropyOf(ctx) != s.CrossEntropy {
			t.Errorf("after Apply(%+v): training %v, policy %v, attention %v, cross-entropy %v", s, ctx.IsTraining(g),
				mixed.PolicyOf(ctx), layers.AttentionOf(ctx), layers.CrossEntropyOf(ctx))
		}
		g.Finalize()
	}
}
