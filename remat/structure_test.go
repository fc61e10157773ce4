package remat_test

import (
	"fmt"
	"slices"
	"testing"

	"github.com/gomlx/gomlx/pkg/core/graph"

	"github.com/onegpu/onegpu/remat"
)

// keptFromBlock walks a built graph the way the embedded backend executes it and returns the nodes
// created by a block's forward pass (ids in [start, end), outputs excluded) that a node of the
// backward pass reads: the block's activations the backward keeps alive. The backward pass is
// every executed node the loss does not depend on. It does not rely on remat's own bookkeeping.
func keptFromBlock(outputs []*graph.Node, loss *graph.Node, start, end int, blockOutputs []*graph.Node) []*graph.Node {
	g := loss.Graph()
	needed := reach(g, outputs)
	forward := reach(g, []*graph.Node{loss})
	var kept []*graph.Node
	seen := map[*graph.Node]bool{}
	for _, n := range g.Nodes() {
		if !needed[n] || forward[n] {
			continue
		}
		for _, in := range n.Inputs() {
			id := int(in.Id())
			if id >= start && id < end && !seen[in] && !slices.Contains(blockOutputs, in) && in.Type() != graph.NodeTypeConstant {
				seen[in] = true
				kept = append(kept, in)
			}
		}
	}
	slices.SortFunc(kept, func(a, b *graph.Node) int { return int(a.Id()) - int(b.Id()) })
	return kept
}

func reach(g *graph.Graph, roots []*graph.Node) map[*graph.Node]bool {
	seen := map[*graph.Node]bool{}
	stack := slices.Clone(roots)
	for len(stack) > 0 {
		n := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if !seen[n] {
			seen[n] = true
			stack = append(stack, n.Inputs()...)
		}
	}
	return seen
}

func describe(nodes []*graph.Node) string {
	s := ""
	for _, n := range nodes {
		s += fmt.Sprintf(" #%d %s %s;", n.Id(), n.Type(), n.Shape())
	}
	return s
}

// TestBackwardKeepsOnlyWhatThePolicySaves: the backward pass of a checkpointed MLP reads none of
// the block's forward values except some that its policy saves. (A saved value the gradients do
// not need, such as a product followed by additions only, is not read at all.)
func TestBackwardKeepsOnlyWhatThePolicySaves(t *testing.T) {
	args := mlpArgs(2, 8, 16, 32)
	for _, c := range []struct {
		name      string
		cfg       *remat.Config // nil: no checkpoint
		saved     []string      // tags of the values the backward may read
		mustSaved []string      // tags of the values the backward must read
	}{
		{"no checkpoint", nil, nil, nil},
		{"nothing_saveable", &remat.Config{}, nil, nil},
		{"dots_saveable", ptr(remat.With(remat.DotsSaveable)), []string{"fc1", "fc2"}, []string{}},
		{"dots_with_no_batch_dims_saveable", ptr(remat.With(remat.DotsWithNoBatchDimsSaveable)), []string{"fc1", "fc2"}, nil},
		{"save_only_these_names:hidden", ptr(remat.With(remat.SaveOnlyTheseNames("hidden"))), []string{"hidden"}, []string{"hidden"}},
		{"save_any_names_but_these:fc2", ptr(remat.With(remat.SaveAnyNamesButThese("fc2"))), []string{"fc1", "hidden"}, []string{"hidden"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			var kept []*graph.Node
			var tagged map[string]*graph.Node
			execute(t, func(in []*graph.Node) []*graph.Node {
				g := in[0].Graph()
				start := len(g.Nodes())
				block := func(in []*graph.Node) []*graph.Node {
					outs, tags := mlpWithTags(in)
					if tagged == nil { // the forward pass runs first
						tagged = tags
					}
					return outs
				}
				var outs []*graph.Node
				if c.cfg == nil {
					outs = block(in)
				} else {
					outs = c.cfg.Checkpoint(block, in...)
				}
				end := len(g.Nodes())
				res := lossAndGradients(outs, in)
				kept = keptFromBlock(res, res[0], start, end, outs)
				return res
			}, args...)
			t.Logf("kept:%s", describe(kept))
			if c.cfg == nil {
				if len(kept) == 0 {
					t.Fatalf("without checkpoint the backward reads no forward value: the walk sees nothing")
				}
				return
			}
			allowed := map[*graph.Node]string{}
			for _, name := range c.saved {
				allowed[tagged[name]] = name
			}
			for _, n := range kept {
				if _, ok := allowed[n]; !ok {
					t.Errorf("the backward reads #%d %s %s, which the policy does not save", n.Id(), n.Type(), n.Shape())
				}
			}
			for _, name := range c.mustSaved {
				if !slices.Contains(kept, tagged[name]) {
					t.Errorf("the backward does not read the saved %q: it recomputes it", name)
				}
			}
		})
	}
}

// mlpWithTags is mlp, also returning the nodes it tagged.
func mlpWithTags(in []*graph.Node) ([]*graph.Node, map[string]*graph.Node) {
	x, w1, b1, w2, b2 := in[0], in[1], in[2], in[3], in[4]
	tags := map[string]*graph.Node{}
	h := remat.NameDot(graph.Dot(x, w1), "fc1")
	tags["fc1"] = h
	h = graph.Tanh(graph.Add(h, graph.InsertAxes(b1, 0)))
	h = remat.Name(h, "hidden")
	tags["hidden"] = h
	y := remat.NameDot(graph.Dot(h, w2), "fc2")
	tags["fc2"] = y
	y = graph.Add(graph.Add(y, graph.InsertAxes(b2, 0)), x)
	return []*graph.Node{y, graph.ReduceAllMean(graph.Square(h))}, tags
}

func ptr[T any](v T) *T { return &v }
