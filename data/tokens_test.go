package data_test

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/gomlx/gomlx/pkg/core/tensors"

	"github.com/onegpu/onegpu/data"
)

// TestTokensWindows: a .npy of int64 ids [2, 10] at sequence 4 gives the four windows of 5 tokens
// (starts 0 and 4 of each row), each once in the first two batches of 2, inputs its first 4
// tokens and labels its last 4; the third batch starts over in the same order; the record changes
// with the ids.
func TestTokensWindows(t *testing.T) {
	ids := make([]int64, 20)
	for i := range ids {
		ids[i] = int64(i)
	}
	path := filepath.Join(t.TempDir(), "ids.npy")
	if err := data.WriteNPYFile(path, tensors.FromFlatDataAndDimensions(ids, 2, 10)); err != nil {
		t.Fatal(err)
	}
	d, err := data.ReadTokens(path, 2, 4, 20, 1)
	if err != nil {
		t.Fatal(err)
	}
	if d.Windows() != 4 {
		t.Fatalf("%d windows, want 4", d.Windows())
	}
	var starts []int32
	for step := range 2 {
		b := d.Batch(step)
		in, lab := tensors.MustCopyFlatData[int32](b[0]), tensors.MustCopyFlatData[int32](b[1])
		for r := range 2 {
			start := in[r*4]
			for i := range 4 {
				if in[r*4+i] != start+int32(i) || lab[r*4+i] != start+int32(i)+1 {
					t.Fatalf("step %d row %d: inputs %v labels %v: not a window", step, r, in[r*4:r*4+4], lab[r*4:r*4+4])
				}
			}
			starts = append(starts, start)
		}
	}
	sorted := slices.Clone(starts)
	slices.Sort(sorted)
	if !slices.Equal(sorted, []int32{0, 4, 10, 14}) {
		t.Errorf("window starts %v, want 0, 4, 10, 14 once each", starts)
	}
	if again := tensors.MustCopyFlatData[int32](d.Batch(2)[0]); again[0] != starts[0] {
		t.Errorf("batch 3 starts at %d, want the first window again (%d)", again[0], starts[0])
	}
	ids[3] = 5
	other, err := data.NewTokens(tensors.FromFlatDataAndDimensions(ids, 2, 10), 2, 4, 20, 1)
	if err != nil || other.Record() == d.Record() {
		t.Errorf("changed ids: record %q (err %v), same as before", other.Record(), err)
	}
}

// TestTokensRefuse: ids the model cannot take, or a file that is not ids, are errors that name
// the problem and the fix.
func TestTokensRefuse(t *testing.T) {
	for _, c := range []struct {
		ids        *tensors.Tensor
		seq, vocab int
		want       string
	}{
		{tensors.FromFlatDataAndDimensions([]int32{1, 2, 3, 300}, 1, 4), 2, 256, "token id 300 at [0, 3] is outside the model's vocabulary [0, 256)"},
		{tensors.FromFlatDataAndDimensions([]int32{1, 2, 3, 4}, 1, 4), 4, 256, "use --seq 3 or less"},
		{tensors.FromFlatDataAndDimensions([]float32{1, 2, 3, 4}, 1, 4), 2, 256, "int32 or int64 [sequences, length]"},
		{tensors.FromFlatDataAndDimensions([]int32{1, 2, 3, 4}, 4), 2, 256, "int32 or int64 [sequences, length]"},
		{tensors.FromFlatDataAndDimensions([]int64{-1, 2, 3, 4}, 1, 4), 2, 256, "token id -1"},
	} {
		if _, err := data.NewTokens(c.ids, 1, c.seq, c.vocab, 0); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s seq %d: %v, want an error containing %q", c.ids.Shape(), c.seq, err, c.want)
		}
	}
}
