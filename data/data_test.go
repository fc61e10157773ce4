package data_test

import (
	"strings"
	"testing"

	"github.com/onegpu/onegpu/data"
)

// TestDataConstructorsRefuseBadSizes: sizes that would panic later, in Batch(), are errors at
// construction, naming the size.
func TestDataConstructorsRefuseBadSizes(t *testing.T) {
	huge := 1 << 40
	for _, tc := range []struct {
		name string
		make func() error
		want string
	}{
		{"synthetic: negative batch", func() error { _, err := data.NewSyntheticTokens(-1, 8, 16, 1); return err }, "batch -1 must be at least 1"},
		{"synthetic: zero sequence", func() error { _, err := data.NewSyntheticTokens(2, 0, 16, 1); return err }, "sequence length 0"},
		{"synthetic: vocabulary of 1", func() error { _, err := data.NewSyntheticTokens(2, 8, 1, 1); return err }, "vocabulary of 1"},
		{"synthetic: no vocabulary", func() error { _, err := data.NewSyntheticTokens(2, 8, 0, 1); return err }, "vocabulary of 0"},
		{"synthetic: overflowing batch", func() error { _, err := data.NewSyntheticTokens(huge, huge, 16, 1); return err }, "more than onegpu counts"},
		{"text: negative batch", func() error { _, err := data.NewText(data.Corpus, -4, 8, 1); return err }, "batch -4"},
		{"text: negative sequence", func() error { _, err := data.NewText(data.Corpus, 4, -8, 1); return err }, "sequence length -8"},
		{"text: too short", func() error { _, err := data.NewText(make([]byte, 90), 4, 8, 1); return err }, "too short"},
		{"classifier: zero classes", func() error { _, err := data.NewClassifierBatch(4, 8, 0, 1); return err }, "0 classes"},
		{"classifier: negative inputs", func() error { _, err := data.NewClassifierBatch(4, -8, 3, 1); return err }, "inputs -8"},
		{"classifier: zero batch", func() error { _, err := data.NewClassifierBatch(0, 8, 3, 1); return err }, "batch 0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.make(); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want one containing %q", err, tc.want)
			}
		})
	}
	// The smallest sizes that work give batches of those sizes.
	d, err := data.NewSyntheticTokens(1, 1, 2, 1)
	if err != nil || d.Batch(0)[1].Shape().Size() != 1 {
		t.Errorf("NewSyntheticTokens(1, 1, 2): %v", err)
	}
	c, err := data.NewClassifierBatch(1, 1, 1, 1)
	if err != nil || c.Batch(0)[1].Shape().Size() != 1 {
		t.Errorf("NewClassifierBatch(1, 1, 1): %v", err)
	}
	text, err := data.NewText(make([]byte, 100), 2, 8, 1) // a tenth of 100 bytes holds one window of 9 bytes and one more position
	if err != nil {
		t.Fatal(err)
	}
	text.Batch(0)
	text.EvalBatch()
}
