package remat

import (
	"fmt"
	"runtime"
	"slices"
	"sync"

	"github.com/gomlx/gomlx/pkg/core/graph"
)

// record is what a residual report needs to know about one checkpointed block of a graph. It
// holds plain data only (no nodes), so that the registry does not keep graphs alive.
type record struct {
	name, policy   string
	rematerialized bool
	start, end     int                     // the forward pass's nodes
	inputs         map[graph.NodeId]string // entry points' sources and their labels
	tags           map[graph.NodeId]Tag
	saved          map[graph.NodeId]bool
}

var registry = struct {
	sync.Mutex
	graphs map[graph.GraphId][]*record
}{graphs: map[graph.GraphId][]*record{}}

// newRecord describes b after its forward pass; captured values are added by finish.
func (b *block) newRecord() *record {
	rec := &record{
		name: b.cfg.name, policy: b.cfg.policy.String(), rematerialized: b.rematerialized(),
		start: b.start, end: b.end,
		inputs: map[graph.NodeId]string{}, tags: map[graph.NodeId]Tag{}, saved: map[graph.NodeId]bool{},
	}
	for i, x := range b.inputs {
		if _, ok := rec.inputs[x.Id()]; !ok && differentiable(x) {
			rec.inputs[x.Id()] = fmt.Sprintf("input #%d", i)
		}
	}
	for _, t := range b.tagged {
		rec.tags[t.node.Id()] = t.key.tag
	}
	for _, n := range b.saved {
		rec.saved[n.Id()] = true
	}
	return rec
}

// register files rec under b's graph, if the block's residuals are kept by the graph's forward
// pass (see reportable). Records go when the graph is garbage collected.
func (b *block) register(rec *record) {
	if !reportable(b.g) {
		return
	}
	registry.Lock()
	defer registry.Unlock()
	records, known := registry.graphs[b.g.GraphId()]
	if !known {
		runtime.AddCleanup(b.g, func(id graph.GraphId) {
			registry.Lock()
			defer registry.Unlock()
			delete(registry.graphs, id)
		}, b.g.GraphId())
	}
	if rec.name == "" {
		rec.name = fmt.Sprintf("checkpoint %d", len(records)+1)
	}
	registry.graphs[b.g.GraphId()] = append(records, rec)
}

// recordsOf returns the blocks registered for g, in creation order.
func recordsOf(g *graph.Graph) []*record {
	registry.Lock()
	defer registry.Unlock()
	return slices.Clone(registry.graphs[g.GraphId()])
}
