package plan_test

import (
	"strings"
	"testing"

	"github.com/onegpu/onegpu/internal/backendtest"
	"github.com/onegpu/onegpu/models"
	"github.com/onegpu/onegpu/plan"
	"github.com/onegpu/onegpu/train"
)

// TestDefaults: the tutorial's setups, as the CLI and the notebooks use them.
func TestDefaults(t *testing.T) {
	gpt, err := plan.Defaults("gpt", "tiny")
	if err != nil {
		t.Fatal(err)
	}
	tiny := models.Presets["tiny"]
	if gpt.Batch != tiny.Batch || gpt.MicroBatches != tiny.MicroBatch || gpt.Schedule.Peak != tiny.LearningRate ||
		gpt.Policy.String() != "params=float32,compute=bfloat16,output=float32" || gpt.Remat.String() != "mlp,attn" || gpt.Validate() != nil {
		t.Errorf("gpt tiny defaults %+v (validate: %v)", gpt, gpt.Validate())
	}
	mlp, err := plan.Defaults("mlp", "")
	if err != nil {
		t.Fatal(err)
	}
	if mlp.Batch != 512 || mlp.MicroBatches != 1 || mlp.Schedule.At(0) != 1e-3 || mlp.Schedule.At(100) != 1e-3 || mlp.Validate() != nil {
		t.Errorf("mlp defaults %+v", mlp)
	}
	if _, err := plan.Defaults("resnet", ""); err == nil || !strings.Contains(err.Error(), "gpt and mlp") {
		t.Errorf("unknown model: %v", err)
	}
	if _, err := plan.Defaults("gpt", "huge"); err == nil || !strings.Contains(err.Error(), "tiny") {
		t.Errorf("unknown preset: %v", err)
	}
}

// TestGrid: the tutorial's 12 variants apply to the GPT; a micro-batch count that does not divide
// the batch is an error, and SearchGrid leaves such counts out.
func TestGrid(t *testing.T) {
	base, err := plan.Defaults("gpt", "tiny")
	if err != nil {
		t.Fatal(err)
	}
	grid := plan.TutorialGrid()
	if len(grid) != 12 || grid[0] != (plan.Variant{Compute: "float32", Remat: "none", MicroBatches: 1}) {
		t.Fatalf("grid %v", grid)
	}
	for _, v := range grid {
		c, err := v.Apply(base)
		if err != nil || c.MicroBatches != v.MicroBatches || c.Remat.String() != v.Remat || c.Policy.Compute.String() == "" {
			t.Errorf("%s: %+v, %v", v, c, err)
		}
	}
	if _, err := (plan.Variant{Compute: "bfloat16", Remat: "none", MicroBatches: 3}).Apply(base); err == nil {
		t.Error("3 micro-batches of a batch of 16 applied without an error")
	}
	for _, v := range plan.SearchGrid(12) {
		if 12%v.MicroBatches != 0 {
			t.Errorf("SearchGrid(12) has %s", v)
		}
	}
}

// TestSearchRefuses: Search plans the GPT only, at positive throughputs.
func TestSearchRefuses(t *testing.T) {
	mlp, _ := plan.Defaults("mlp", "")
	gpt, _ := plan.Defaults("gpt", "tiny")
	for _, tc := range []struct {
		base train.Config
		rate plan.Throughput
		want string
	}{
		{mlp, plan.A5000, "plan the gpt"},
		{gpt, plan.Throughput{Float32: 0, BFloat16: 1}, "must be positive"},
	} {
		if _, err := plan.Search(backendtest.Embedded(), tc.base, 1<<30, tc.rate, false); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Search: %v, want %q", err, tc.want)
		}
	}
}
