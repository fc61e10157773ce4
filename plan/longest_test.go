package plan_test

import (
	"fmt"
	"math/bits"
	"strings"
	"testing"

	"github.com/gomlx/gomlx/pkg/core/dtypes"

	"github.com/onegpu/onegpu/internal/testkit"
	"github.com/onegpu/onegpu/mixed"
	"github.com/onegpu/onegpu/models"
	"github.com/onegpu/onegpu/plan"
	"github.com/onegpu/onegpu/recipes"
	"github.com/onegpu/onegpu/train"
)

// longBase is the tiny GPT trained one sequence at a time, bfloat16 with remat of whole blocks:
// the leanest run, whose memory at long sequences is attention's and the logits'.
func longBase(t *testing.T) (train.Config, recipes.Family) {
	t.Helper()
	family, err := recipes.Lookup("gpt")
	if err != nil {
		t.Fatal(err)
	}
	base, err := recipes.Defaults("gpt", "tiny")
	if err != nil {
		t.Fatal(err)
	}
	base.Batch, base.MicroBatches = 1, 1
	base.Policy = mixed.Policy{Param: dtypes.Float32, Compute: dtypes.BFloat16, Output: dtypes.Float32}
	base.Remat = train.Remat{Kinds: []string{models.KindBlock}}
	return base, family
}

// TestLongestThatFits: on a 96 MiB budget the tiny GPT's longest sequence is one that fits while
// the next multiple of 128 does not (both checked with EstimateStep), found with at most
// 2·log2(seq/128)+2 estimates; chunked attention and loss fit at least 4 times the plain length.
// LongestOver picks the chunked row.
func TestLongestThatFits(t *testing.T) {
	if testing.Short() {
		t.Skip("estimates about 30 steps of up to 8,000 ops")
	}
	backend := testkit.Embedded()
	base, family := longBase(t)
	const budget = 96 << 20
	estimate := func(k plan.Chunking, seq int) int64 {
		m, err := family.WithSeq(base.Model, seq)
		if err != nil {
			t.Fatal(err)
		}
		c := k.Apply(base)
		c.Model = m
		e, err := plan.EstimateStep(backend, c, false)
		if err != nil {
			t.Fatal(err)
		}
		return e.Memory()
	}
	chunkings := []plan.Chunking{plan.AllChunkings[0], plan.AllChunkings[3]}
	rows, best, err := plan.LongestOver(backend, base, budget, family.WithSeq, chunkings, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, row := range rows {
		if !row.Fits || row.Bound != "" {
			t.Fatalf("%+v: want a fitting length set by the budget", row)
		}
		if n := row.Seq / plan.SeqStep; row.Evaluations > 2*bits.Len(uint(n))+2 {
			t.Errorf("%s: %d lengths estimated for %d tokens, want at most %d", row.Chunking, row.Evaluations, row.Seq, 2*bits.Len(uint(n))+2)
		}
		if m := estimate(row.Chunking, row.Seq); m != row.Memory || m > budget {
			t.Errorf("%s at %d tokens: %d bytes estimated, the search said %d (budget %d)", row.Chunking, row.Seq, m, row.Memory, budget)
		}
		if m := estimate(row.Chunking, row.Seq+plan.SeqStep); m <= budget {
			t.Errorf("%s: %d tokens fit too (%d bytes), the search answered %d", row.Chunking, row.Seq+plan.SeqStep, m, row.Seq)
		}
	}
	t.Logf("plain %d tokens, chunked %d tokens", rows[0].Seq, rows[1].Seq)
	if rows[1].Seq < 4*rows[0].Seq || best != 1 {
		t.Errorf("chunked fits %d tokens, plain %d (best %d): want at least 4x, and the chunked row chosen", rows[1].Seq, rows[0].Seq, best)
	}
}

// TestLongestStopsAtTheModel: a model that takes at most 1000 positions ends the search at 896
// (the multiple of 128 below) with the model's reason, whatever the budget; a budget that fits
// not even 128 tokens says so; a model that refuses 128 tokens is an error.
func TestLongestStopsAtTheModel(t *testing.T) {
	backend := testkit.Embedded()
	base, family := longBase(t)
	upTo := func(limit int) func(train.Model, int) (train.Model, error) {
		return func(m train.Model, seq int) (train.Model, error) {
			if seq > limit {
				return m, fmt.Errorf("this model takes at most %d positions", limit)
			}
			return family.WithSeq(m, seq)
		}
	}
	row, err := plan.LongestThatFits(backend, base, 1<<40, upTo(1000), plan.Chunking{}, false, nil)
	if err != nil || row.Seq != 896 || !strings.Contains(row.Bound, "at most 1000 positions") {
		t.Errorf("got %+v, %v; want 896 tokens bounded by the model", row, err)
	}
	if row, err := plan.LongestThatFits(backend, base, 1<<10, upTo(1000), plan.Chunking{}, false, nil); err != nil || row.Fits {
		t.Errorf("a budget of 1 KiB: %+v, %v; want nothing fitting", row, err)
	}
	if _, err := plan.LongestThatFits(backend, base, 1<<40, upTo(100), plan.Chunking{}, false, nil); err == nil || !strings.Contains(err.Error(), "at most 100 positions") {
		t.Errorf("a model of 100 positions: %v, want its error", err)
	}
}
