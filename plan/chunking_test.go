package plan_test

import (
	"encoding/json"
	"testing"

	"github.com/onegpu/onegpu/internal/testkit"
	"github.com/onegpu/onegpu/plan"
)

// TestSearchLadderChunks: on a budget just under the least the plain tiny GPT needs at sequence
// 4096 (one sequence per step), the ladder answers with a chunked rung on which a configuration
// fits, and given the plain rung alone it answers that nothing fits; on 1 KiB it answers with the
// most chunked rung's candidates, none fitting.
func TestSearchLadderChunks(t *testing.T) {
	backend := testkit.Embedded()
	base, family := longBase(t)
	m, err := family.WithSeq(base.Model, 4096)
	if err != nil {
		t.Fatal(err)
	}
	base.Model = m
	least := func(rows []plan.Candidate) int64 {
		m := rows[0].Memory()
		for _, r := range rows {
			m = min(m, r.Memory())
		}
		return m
	}
	rows, err := plan.Search(backend, base, 1<<40, plan.A5000, false)
	if err != nil {
		t.Fatal(err)
	}
	budget := least(rows) - 1
	states := []plan.StateOptions{plan.TutorialTechniques}
	rows, _, chunking, err := plan.SearchLadder(backend, base, budget, plan.A5000, false, states, plan.ChunkingLadder)
	if err != nil {
		t.Fatal(err)
	}
	if best := plan.Fastest(rows); best < 0 || chunking.Plain() || rows[best].Memory() > budget {
		t.Errorf("budget %d: answered %s with best %d, want a chunked rung that fits", budget, chunking, best)
	}
	rows, _, chunking, err = plan.SearchLadder(backend, base, budget, plan.A5000, false, states, plan.ChunkingLadder[:1])
	if err != nil || plan.Fastest(rows) >= 0 || !chunking.Plain() {
		t.Errorf("the plain rung alone: %s, best %d, %v; want nothing fitting", chunking, plan.Fastest(rows), err)
	}
	// A budget nothing fits: the answer is the last rung's, the most chunked (the smallest).
	last := plan.ChunkingLadder[len(plan.ChunkingLadder)-1]
	rows, _, chunking, err = plan.SearchLadder(backend, base, 1<<10, plan.A5000, false, states, plan.ChunkingLadder)
	if err != nil || plan.Fastest(rows) >= 0 || chunking != last {
		t.Errorf("1 KiB: %s, best %d, %v; want nothing fitting, answered with %s", chunking, plan.Fastest(rows), err, last)
	}
}

// TestChunkingJSON: a chunking is written in the forms the CLI's flags read.
func TestChunkingJSON(t *testing.T) {
	b, err := json.Marshal(plan.AllChunkings[3])
	if err != nil || string(b) != `{"attention":"chunked","cross_entropy":"chunked=512"}` {
		t.Errorf("got %s, %v", b, err)
	}
	if got := plan.AllChunkings[1].Flags(); got != "--attention plain --cross-entropy chunked=512" {
		t.Errorf("flags %q", got)
	}
}
