package remat_test

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/shapes"

	"github.com/onegpu/onegpu/analysis"
	"github.com/onegpu/onegpu/internal/blocks"
	"github.com/onegpu/onegpu/remat"
)

func analyze(t *testing.T, c blocks.Config, spec string, policy remat.Policy) blocks.Analysis {
	t.Helper()
	s, err := blocks.ParseSpec(spec)
	if err != nil {
		t.Fatal(err)
	}
	a, err := blocks.Analyze(embedded(), c, s, remat.With(policy))
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// TestResiduals: the report lists, per checkpointed block, what its backward pass keeps: the
// block's input with nothing_saveable, the products with weights with
// dots_with_no_batch_dims_saveable, and the whole forward pass when nothing is rematerialized.
func TestResiduals(t *testing.T) {
	c := tiny
	activation := int64(c.Batch * c.Seq * c.Width * 4)

	none := analyze(t, c, "none", remat.NothingSaveable).Residuals
	if len(none.Blocks) != 0 || none.OutsideBytes == 0 {
		t.Errorf("without checkpoints: %d blocks, %d bytes outside blocks; want none and the whole forward pass", len(none.Blocks), none.OutsideBytes)
	}

	inputs := analyze(t, c, "mlp,attn", remat.NothingSaveable).Residuals
	if len(inputs.Blocks) != 2*c.Blocks {
		t.Fatalf("%d blocks reported, want %d", len(inputs.Blocks), 2*c.Blocks)
	}
	for i, b := range inputs.Blocks {
		want := []remat.Residual{{Name: "input #0", Kind: remat.ResidualInput, Op: "Identity", DType: "Float32",
			Shape: []int{c.Batch, c.Seq, c.Width}, Bytes: activation}}
		if i == 0 {
			want = nil // the first block's input is the step's input parameter, held anyway
		}
		if !b.Rematerialized || b.Policy != "nothing_saveable" || !slices.EqualFunc(b.Residuals, want, equalResidual) {
			t.Errorf("block %s: %+v, want residuals %+v", b.Block, b, want)
		}
	}
	if inputs.Blocks[1].Block != "/block_00/mlp" || inputs.BlockBytes != int64(2*c.Blocks-1)*activation ||
		len(inputs.Policies) != 1 || inputs.Policies[0].Bytes != inputs.BlockBytes || inputs.Policies[0].Blocks != 2*c.Blocks {
		t.Errorf("names or totals wrong: %+v", inputs)
	}

	dots := analyze(t, c, "mlp,attn", remat.DotsWithNoBatchDimsSaveable).Residuals
	saved := map[string]bool{}
	for _, b := range dots.Blocks {
		for _, r := range b.Residuals {
			if r.Kind == remat.ResidualSaved {
				saved[r.Name] = true
			} else if r.Kind != remat.ResidualInput {
				t.Errorf("block %s keeps %+v", b.Block, r)
			}
		}
	}
	for name := range saved {
		if !slices.Contains([]string{"attn_q", "attn_k", "attn_v", "attn_out", "mlp_in", "mlp_out"}, name) {
			t.Errorf("dots_with_no_batch_dims_saveable saved %q", name)
		}
	}
	if !saved["mlp_in"] || !saved["attn_v"] {
		t.Errorf("dots_with_no_batch_dims_saveable saved only %v; want at least mlp_in and attn_v, which the gradients read", saved)
	}

	everything := analyze(t, c, "block", remat.EverythingSaveable).Residuals
	if len(everything.Blocks) != c.Blocks || everything.Blocks[0].Rematerialized {
		t.Fatalf("everything_saveable: %+v", everything.Blocks)
	}
	if everything.BlockBytes+everything.OutsideBytes != none.OutsideBytes {
		t.Errorf("everything_saveable keeps %d + %d bytes, without checkpoints %d", everything.BlockBytes, everything.OutsideBytes, none.OutsideBytes)
	}

	data, err := json.Marshal(dots)
	if err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{`"blocks"`, `"block":"/block_00/attn"`, `"policy":"dots_with_no_batch_dims_saveable"`, `"kind":"saved"`, `"name":"attn_q"`, `"outside_bytes"`} {
		if !strings.Contains(string(data), key) {
			t.Errorf("JSON lacks %s: %s", key, data)
		}
	}
	table := dots.String()
	for _, want := range []string{"BLOCK", "/block_01/mlp", "mlp_in", "saved", "input #0", "dots_with_no_batch_dims_saveable", "outside blocks"} {
		if !strings.Contains(table, want) {
			t.Errorf("table lacks %q:\n%s", want, table)
		}
	}
	var summary strings.Builder
	if err := dots.WriteSummary(&summary); err != nil || !strings.Contains(summary.String(), "/block_01/attn") {
		t.Errorf("summary: %v\n%s", err, summary.String())
	}
	t.Logf("\n%s", table)
}

func equalResidual(a, b remat.Residual) bool {
	return a.Name == b.Name && a.Kind == b.Kind && a.Op == b.Op && a.DType == b.DType && slices.Equal(a.Shape, b.Shape) && a.Bytes == b.Bytes
}

func TestResidualsNeedsTheLoss(t *testing.T) {
	g := graph.NewGraph(embedded(), "no loss")
	defer g.Finalize()
	x := graph.Parameter(g, "x", shapes.Make(dtypes.Float32, 3))
	if _, err := remat.Residuals(analysis.NewProgram(g, graph.Sin(x))); err == nil || !strings.Contains(err.Error(), "Loss") {
		t.Errorf("got %v, want an error asking for the loss", err)
	}
}
