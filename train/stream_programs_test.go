package train_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/gomlx/gomlx/pkg/core/graph"

	"github.com/onegpu/onegpu/analysis"
	"github.com/onegpu/onegpu/data"
	"github.com/onegpu/onegpu/models"
	"github.com/onegpu/onegpu/plan"
	"github.com/onegpu/onegpu/train"
)

// ops lists a graph's nodes as op and shape, in order.
func ops(g *graph.Graph) []string {
	var out []string
	for _, n := range g.Nodes() {
		out = append(out, fmt.Sprintf("%s %s", n.Type(), n.Shape()))
	}
	return out
}

// TestPlannerAnalyzesTheExecutorsPrograms: the programs the planner analyzes for a streamed step
// (Trainer.StreamedPrograms, which plan.EstimateStreamed reads) are the ones the streamed executor
// ran, op for op and shape for shape, for every stage, with the whole block rematerialized (the
// kind the executor drops in a block's programs: it recomputes the block from its kept input
// already) and rematerialization inside the block. The planner's estimate counts those programs.
func TestPlannerAnalyzesTheExecutorsPrograms(t *testing.T) {
	config := streamConfig(t)
	config.Remat = train.Remat{Kinds: []string{models.KindBlock, models.KindMLP}}
	config.Offload = train.OffloadParams
	tr, err := train.New(embedded(), config)
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	g := gptOf(config)
	batches, err := data.NewSyntheticTokens(config.Batch, g.SeqLen, g.Vocab, 1)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tr.Run(batches, train.RunOptions{Steps: 1}); err != nil {
		t.Fatal(err)
	}
	planned, err := tr.StreamedPrograms()
	if err != nil {
		t.Fatal(err)
	}
	defer planned.Finalize()
	for _, st := range planned.Stages {
		ran := train.StreamedRan(tr, st.Name)
		executed := ran[:]
		if st.Name == "head" {
			executed = ran[1:] // one program
		}
		if len(executed) != len(st.Programs) {
			t.Fatalf("%s: %d programs planned, %d ran", st.Name, len(st.Programs), len(executed))
		}
		for i, p := range st.Programs {
			if executed[i] == nil {
				t.Fatalf("%s: program %d did not run", st.Name, i)
			}
			// Compiling adds an Identity for each output that repeats another (the head's loss and
			// metric counts): the ran graph is the planned one and those.
			want, got := ops(executed[i]), ops(p.Graph)
			same := len(want) >= len(got)
			for j := range got {
				if same = same && want[j] == got[j]; !same {
					t.Errorf("%s program %d: op %d is %s planned, %s ran", st.Name, i, j, got[j], want[j])
					break
				}
			}
			for _, extra := range want[min(len(got), len(want)):] {
				if same = same && strings.HasPrefix(extra, "Identity "); !same {
					t.Errorf("%s program %d: %d ops planned, %d ran, beyond them %s", st.Name, i, len(got), len(want), extra)
					break
				}
			}
		}
	}
	s, err := plan.EstimateStreamed(embedded(), config, plan.StreamOptions{Throughput: plan.A5000})
	if err != nil {
		t.Fatal(err)
	}
	var flops, params int64
	for _, p := range planned.Stages[1].Programs {
		flops += analysis.Analyze(p).FLOPs
	}
	for _, v := range planned.Stages[1].Trainable {
		params += int64(v.Shape().Size())
	}
	if block := s.Stages[1]; block.Name != "block" || block.Count != g.Layers || block.FLOPs != flops || block.Params != params {
		t.Errorf("the planner's block %+v, want %d of them, %d FLOPs and %d parameters from the executor's programs", block, g.Layers, flops, params)
	}
}
