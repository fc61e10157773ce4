package train

import "github.com/gomlx/gomlx/pkg/core/graph"

// StreamedRan returns the graphs a streamed trainer's executor last ran for the stage named (
// "embed", "block", "head"): its forward and its backward program (the head's one program is its
// backward); nil before a step. For tests that compare them with the programs the planner
// analyzes (Trainer.StreamedPrograms).
func StreamedRan(t *Trainer, stage string) [2]*graph.Graph {
	s, ok := t.exec.(*streamExecutor)
	if !ok {
		return [2]*graph.Graph{}
	}
	for _, st := range []*streamStage{s.embed, s.block, s.head} {
		if st != nil && st.name == stage {
			return st.ran
		}
	}
	return [2]*graph.Graph{}
}
