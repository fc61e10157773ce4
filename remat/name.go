package remat

import (
	"fmt"
	"sync"

	"github.com/gomlx/gomlx/pkg/core/graph"
)

// Name tags x with a name, so that a Policy can choose to save it from the forward pass instead of
// recomputing it, like jax.ad_checkpoint.checkpoint_name. It returns x (in the forward pass) or the
// value to use in its place (in a recomputation), so use its result:
//
//	h = remat.Name(h, "attn_out")
//
// Outside a checkpointed function it returns x unchanged. Inside one, values are matched between
// the forward pass and the recomputation by name and order of appearance, which holds because the
// same Go code runs twice. Names need not be unique; a policy that saves a name saves every value
// with that name.
func Name(x *graph.Node, name string) *graph.Node {
	return tag(x, Tag{Name: name})
}

// NameDot tags x, the output of a matrix multiplication with no batch dimensions (a product with
// weights, such as a dense layer's x·W), for DotsSaveable and DotsWithNoBatchDimsSaveable. name is
// optional (it also makes the value selectable by SaveOnlyTheseNames).
//
// GoMLX v0.26.0 offers no hook to see ops as they are created, so the dot policies only see the
// products that layers tag: a layer that wants them to work calls NameDot (or NameBatchedDot) on
// each product it computes. Products left untagged are always recomputed.
func NameDot(x *graph.Node, name string) *graph.Node {
	return tag(x, Tag{Name: name, Dot: true})
}

// NameBatchedDot tags x, the output of a matrix multiplication with batch dimensions (attention's
// per-head scores "bqhd,bkhd->bhqk" and its weighted sum of values), for DotsSaveable. Such
// products are not saved by DotsWithNoBatchDimsSaveable. See NameDot.
func NameBatchedDot(x *graph.Node, name string) *graph.Node {
	return tag(x, Tag{Name: name, Dot: true, BatchDims: true})
}

// frame is a checkpointed function being built: its forward pass or a recomputation.
type frame struct {
	b         *block
	recompute bool
	counts    map[Tag]int // occurrences so far of each tag, to pair values across passes
}

var (
	framesMu sync.Mutex
	frames   = map[graph.GraphId][]*frame{}
)

// within runs fn with f as the innermost frame of g.
func within(g *graph.Graph, f *frame, fn func()) {
	framesMu.Lock()
	frames[g.GraphId()] = append(frames[g.GraphId()], f)
	framesMu.Unlock()
	defer func() {
		framesMu.Lock()
		defer framesMu.Unlock()
		stack := frames[g.GraphId()]
		stack = stack[:len(stack)-1]
		if len(stack) == 0 {
			delete(frames, g.GraphId())
		} else {
			frames[g.GraphId()] = stack
		}
	}()
	fn()
}

// innermost returns the innermost frame of g, or nil outside checkpointed functions.
func innermost(g *graph.Graph) *frame {
	framesMu.Lock()
	defer framesMu.Unlock()
	stack := frames[g.GraphId()]
	if len(stack) == 0 {
		return nil
	}
	return stack[len(stack)-1]
}

// reportable tells whether a block created now in g is one whose residuals the forward pass keeps:
// it is not nested in another rematerialized block nor created by a recomputation.
func reportable(g *graph.Graph) bool {
	framesMu.Lock()
	defer framesMu.Unlock()
	for _, f := range frames[g.GraphId()] {
		if f.recompute || f.b.rematerialized() {
			return false
		}
	}
	return true
}

func tag(x *graph.Node, t Tag) *graph.Node {
	if x == nil {
		panic(fmt.Errorf("remat: tagging a nil node (tag %+v)", t))
	}
	f := innermost(x.Graph())
	if f == nil {
		return x
	}
	key := tagKey{t, f.counts[t]}
	f.counts[t]++
	b := f.b
	if !f.recompute {
		b.tagged = append(b.tagged, taggedValue{key: key, node: x})
		if b.cfg.policy.Saves(t) && b.rematerialized() {
			b.saved[key] = x
		}
		return x
	}
	forward, ok := b.saved[key]
	if !ok {
		return x // not saved: recomputed
	}
	if !forward.Shape().Equal(x.Shape()) {
		panic(fmt.Errorf("remat: value %s (occurrence %d) is %s in the recomputation but was %s in the forward pass: "+
			"a checkpointed function must build the same graph each time it runs", describeTag(t), key.n, x.Shape(), forward.Shape()))
	}
	return b.useSaved(forward, x)
}

// tagKey pairs a tagged value of the forward pass with the same value in a recomputation.
type tagKey struct {
	tag Tag
	n   int
}

type taggedValue struct {
	key  tagKey
	node *graph.Node
}

func describeTag(t Tag) string {
	switch {
	case t.Name != "":
		return fmt.Sprintf("%q", t.Name)
	case t.BatchDims:
		return "an unnamed batched product"
	default:
		return "an unnamed product"
	}
}
