package train_test

import (
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/gomlx/gomlx/pkg/core/tensors"

	"github.com/onegpu/onegpu/data"
	"github.com/onegpu/onegpu/internal/testkit"
	"github.com/onegpu/onegpu/mixed"
	"github.com/onegpu/onegpu/train"
)

// TestLoadHF: the committed transformers fixture opened with LoadHF, its tokens read from the
// committed .npy (the fixture's own ids: checked here): its mean next-token loss is transformers'
// (the fixture's float32 logits, cross-entropy in float64) within 1e-6 relative, and
// Generate's next token after each prefix of the first sequence is the argmax of transformers'
// logits there.
func TestLoadHF(t *testing.T) {
	fx := testkit.ReadHFFixture(t, "llama3_untied")
	f32, err := mixed.ParsePolicy("float32")
	if err != nil {
		t.Fatal(err)
	}
	m, err := train.LoadHF(testkit.Embedded(), fx.Dir, f32, fx.Seq-1)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	inputs, labels := fx.NextTokens()
	ids, err := data.ReadTokens(fx.Dir+".tokens.npy", fx.Batch, fx.Seq-1, 1<<20, 0)
	if err != nil {
		t.Fatal(err)
	}
	batch := ids.Sequences(0, ids.Rows())
	if got := [][]int32{tensors.MustCopyFlatData[int32](batch[0]), tensors.MustCopyFlatData[int32](batch[1])}; !slices.Equal(got[0], inputs) || !slices.Equal(got[1], labels) {
		t.Fatalf("%s.tokens.npy holds other ids than its .logits.safetensors: %v, want %v", fx.Dir, got, [][]int32{inputs, labels})
	}
	loss, _, err := m.Loss(batch)
	if err != nil {
		t.Fatal(err)
	}
	want, _ := fx.CrossEntropy()
	if math.Abs(loss-want) > 1e-6*want {
		t.Errorf("loss %.8f, transformers' %.8f", loss, want)
	}

	vocab := len(fx.Logits) / len(fx.Tokens)
	for _, k := range []int{1, 5, fx.Seq - 1} {
		prefix := inputs[:k]
		next, err := m.Generate(prefix, 1)
		if err != nil {
			t.Fatal(err)
		}
		row := fx.Logits[(k-1)*vocab : k*vocab]
		best := 0
		for i, v := range row {
			if v > row[best] {
				best = i
			}
		}
		if int(next[0]) != best {
			t.Errorf("after %d tokens: generated %d, transformers' argmax %d", k, next[0], best)
		}
	}
}

// TestLoadHFRefuses: a folder without config.json and a sequence longer than the model reads are
// errors naming them.
func TestLoadHFRefuses(t *testing.T) {
	fx := testkit.ReadHFFixture(t, "llama3_untied")
	f32, _ := mixed.ParsePolicy("float32")
	if _, err := train.LoadHF(testkit.Embedded(), t.TempDir(), f32, 0); err == nil || !strings.Contains(err.Error(), "config.json") {
		t.Errorf("a folder without config.json: %v", err)
	}
	if _, err := train.LoadHF(testkit.Embedded(), fx.Dir, f32, 1<<30); err == nil || !strings.Contains(err.Error(), "1073741824") {
		t.Errorf("sequence 2^30: %v", err)
	}
}
