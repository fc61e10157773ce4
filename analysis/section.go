package analysis

import (
	"runtime"
	"slices"
	"sync"

	"github.com/gomlx/gomlx/pkg/core/graph"
)

// Section marks the nodes g creates from now until the returned function is called as one
// section of the program named label: a remat block's forward pass or its recomputation, an
// attention core, a model's loss. Analyze reports, for each executed node, the outermost and the
// innermost section it was created in (Memory.Steps), so that a timeline of memory can say what
// each part of a step holds. Sections nest (call end in the reverse order, e.g. with defer); they
// change nothing in the graph.
//
//	defer Section(x.Graph(), "attention")()
func Section(g *graph.Graph, label string) (end func()) {
	sections.Lock()
	defer sections.Unlock()
	log, known := sections.graphs[g.GraphId()]
	if !known {
		log = &sectionLog{}
		sections.graphs[g.GraphId()] = log
		runtime.AddCleanup(g, func(id graph.GraphId) {
			sections.Lock()
			defer sections.Unlock()
			delete(sections.graphs, id)
		}, g.GraphId())
	}
	s := sectionSpan{label: label, start: len(g.Nodes()), depth: log.open}
	log.open++
	return func() {
		sections.Lock()
		defer sections.Unlock()
		s.end = len(g.Nodes())
		log.open--
		log.spans = append(log.spans, s)
	}
}

// sectionSpan is a section's nodes: ids in [start, end), opened within depth other sections.
type sectionSpan struct {
	label      string
	start, end int
	depth      int
}

type sectionLog struct {
	spans []sectionSpan
	open  int
}

var sections = struct {
	sync.Mutex
	graphs map[graph.GraphId]*sectionLog
}{graphs: map[graph.GraphId]*sectionLog{}}

// nodeSections returns, for each of g's nodes, its outermost and innermost section's label ("" for
// none).
func nodeSections(g *graph.Graph) (outer, inner []string) {
	n := len(g.Nodes())
	outer, inner = make([]string, n), make([]string, n)
	sections.Lock()
	var spans []sectionSpan
	if log := sections.graphs[g.GraphId()]; log != nil {
		spans = slices.Clone(log.spans)
	}
	sections.Unlock()
	slices.SortStableFunc(spans, func(a, b sectionSpan) int { return a.depth - b.depth })
	for _, s := range spans { // outer first: an inner section paints over its parent
		for id := s.start; id < min(s.end, n); id++ {
			if s.depth == 0 {
				outer[id] = s.label
			}
			inner[id] = s.label
		}
	}
	return outer, inner
}
