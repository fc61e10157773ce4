package train_test

import (
	"reflect"
	"sort"
	"testing"

	"github.com/gomlx/gomlx/pkg/core/tensors"

	"github.com/onegpu/onegpu/internal/testkit"
	"github.com/onegpu/onegpu/mixed"
	"github.com/onegpu/onegpu/train"
)

// TestStreamedOverlapIsSerial: the streamed step's host update, each stage updated while the device
// computes the next stage's backward pass (speculated under a loss scale or a clip, undone and done
// again where the decision says so), leaves every variable as the serialized update (every stage
// after the backward pass) does, bit for bit, after 4 steps of the tiny GPT on the embedded
// backend: without a loss scale or a clip, with a loss scale so large that every step overflows
// (every step skipped: the head's gradients say so before any update), and with a dynamic loss
// scale and a global-norm clip of 1, above the norms of the first stages' gradients and below the
// step's (speculations undone and done again clipped; the losses differ from the unclipped run's),
// with Adam's flat loop and with Adafactor's graph update, which the blocks share.
func TestStreamedOverlapIsSerial(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		edit func(c *train.Config)
	}{
		{"plain", func(c *train.Config) {}},
		{"overflow", func(c *train.Config) { c.LossScale = mixed.StaticLossScale(3e38) }},
		{"clip", func(c *train.Config) { c.LossScale, c.ClipNorm = mixed.NewDynamicLossScale(), 1 }},
		// Adafactor has no flat loop: the blocks' stages run the first block's graph update
		// (StageLike), whose undo records put back what the shared program wrote.
		{"adafactor clip", func(c *train.Config) {
			c.Optimizer, c.LossScale, c.ClipNorm = mustOptimizer(t, "adafactor"), mixed.NewDynamicLossScale(), 1
		}},
	}
	var plain *train.History
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			config := streamConfig(t)
			config.Offload = train.OffloadParams
			c.edit(&config)
			runs := map[bool]*train.History{}
			vars := map[bool]map[string]*tensors.Tensor{}
			for _, serial := range []bool{true, false} {
				config.SerialHostUpdate = serial
				tr, h := runOffload(t, embedded(), config, 4, "")
				runs[serial], vars[serial] = h, testkit.Variables(t, tr.Ctx)
				if stats := streamStats(t, h.Offload); stats.Overlapped == serial {
					t.Errorf("serial %v: the step reports overlapped %v", serial, stats.Overlapped)
				}
				tr.Close()
			}
			sameLosses(t, runs[true], runs[false], 0)
			names := make([]string, 0, len(vars[true]))
			for name := range vars[true] {
				names = append(names, name)
			}
			sort.Strings(names)
			for _, name := range names {
				got, ok := vars[false][name]
				if !ok {
					t.Fatalf("no variable %s in the overlapped run", name)
				}
				if want := vars[true][name]; !want.DType().IsFloat() {
					if !reflect.DeepEqual(got.Value(), want.Value()) {
						t.Errorf("%s: %v overlapped, %v serialized", name, got.Value(), want.Value())
					}
				} else {
					testkit.AssertBitIdentical(t, []*tensors.Tensor{got}, []*tensors.Tensor{want})
				}
			}
			switch c.name {
			case "plain":
				plain = runs[false]
			case "overflow":
				for i, s := range runs[false].Steps {
					if !s.Skipped {
						t.Errorf("step %d was not skipped", i+1)
					}
				}
			case "clip", "adafactor clip":
				if c.name == "clip" && plain != nil {
					if last := len(plain.Steps) - 1; runs[false].Steps[last].Loss == plain.Steps[last].Loss {
						t.Errorf("the clipped run's last loss %.9g is the unclipped run's: the clip does not act", plain.Steps[last].Loss)
					}
				}
				// The head's and the last block's norms are below the clip, the step's above it: the
				// host speculates on them, then puts them back and updates them again clipped.
				if stats := streamStats(t, runs[false].Offload); stats.Undone == 0 {
					t.Errorf("the last step undid no speculated update (%d speculated): the clip should act after the first stages", stats.Speculated)
				} else {
					t.Logf("the last step: %d stages speculated, %d undone", stats.Speculated, stats.Undone)
				}
			}
		})
	}
}
