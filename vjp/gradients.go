package vjp

import (
	"fmt"
	"log"
	"sort"
	"sync"

	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/shapes"
)

// rule computes the gradients of node's inputs from the cotangent v of its output. It returns an
// error, not a panic, when it cannot handle the node: the caller then uses GoMLX's own rule.
type rule func(node, v *graph.Node) ([]*graph.Node, error)

// rules are the gradient rules onegpu installs, by node type, and why each replaces GoMLX v0.26.0's.
var rules = map[graph.NodeType]struct {
	fn  rule
	why string
}{
	graph.NodeTypeDotGeneral:     {dotGeneralGrad, "stock rule materializes [batch, in, out] products and sums them in the compute dtype"},
	graph.NodeTypeDot:            {dotGrad, "stock rule materializes [i, j, k] products and sums them in the compute dtype"},
	graph.NodeTypeMul:            {mulGrad, "stock rule broadcasts the other operand to full size first"},
	graph.NodeTypeDiv:            {divGrad, "stock rule broadcasts both operands to full size first"},
	graph.NodeTypeAdd:            {addGrad, "stock rule sums broadcast axes in 16 bits"},
	graph.NodeTypeSub:            {subGrad, "stock rule sums broadcast axes in 16 bits"},
	graph.NodeTypeBroadcastInDim: {broadcastInDimGrad, "stock rule sums broadcast axes in 16 bits"},
	graph.NodeTypeSlice:          {sliceGrad, "stock rule uses Pad, which the embedded backend lacks"},
	graph.NodeTypeRsqrt:          {rsqrtGrad, "no stock rule"},
	graph.NodeTypeExpm1:          {expm1Grad, "no stock rule"},
	graph.NodeTypeIdentity:       {identityGrad, "no stock rule"},
	graph.NodeTypeClamp:          {clampGrad, "no stock rule"},
	graph.NodeTypeSign:           {zeroGrad, "no stock rule (piecewise constant)"},
	graph.NodeTypeRound:          {zeroGrad, "no stock rule (piecewise constant)"},
	graph.NodeTypeFloor:          {zeroGrad, "no stock rule (piecewise constant)"},
	graph.NodeTypeCeil:           {zeroGrad, "no stock rule (piecewise constant)"},
}

var (
	installOnce sync.Once
	stockRules  = map[graph.NodeType]graph.VJP{}

	stockGraphs sync.Map // graph.GraphId -> struct{}: graphs that asked for GoMLX's own rules

	fallbackMu      sync.Mutex
	fallbackReasons = map[string]bool{}
)

// init installs onegpu's gradient rules as soon as this package is imported, so that they hold on every
// backend, including one GoMLX created (backends.New), not only on those NewBackend creates.
func init() { Install() }

// Install replaces, once per process, GoMLX v0.26.0's gradient rules for the ops whose
// stock rules are slow, imprecise in 16 bits or missing (see the rules table): matmuls become
// matmuls, broadcast gradients are summed in float32 when the cotangent is 16-bit, Slice no longer
// needs Pad, and Rsqrt, Expm1, Identity, Clamp and the rounding ops get rules.
//
// It is idempotent and safe to call from several goroutines. Importing this package (platform and analysis import it) calls it (at package
// initialization, before any graph can be built), so calling it again is never needed; it stays
// exported for programs that want to say so.
func Install() {
	installOnce.Do(func() {
		for nodeType, r := range rules {
			stock := graph.VJPRegistration[nodeType] // nil where GoMLX has no rule
			stockRules[nodeType] = stock
			graph.VJPRegistration[nodeType] = replacement(nodeType, r.fn, stock)
		}
	})
}

// UseStock makes every gradient later built in g use GoMLX v0.26.0's own rules, for
// comparisons (`onegpu memory --stock-gradients`, benchmarks). Ops GoMLX has no rule for keep
// onegpu's.
func UseStock(g *graph.Graph) { stockGraphs.Store(g.GraphId(), struct{}{}) }

func usesStock(g *graph.Graph) bool {
	_, ok := stockGraphs.Load(g.GraphId())
	return ok
}

func replacement(nodeType graph.NodeType, fn rule, stock graph.VJP) graph.VJP {
	return func(node *graph.Node, vjps []*graph.Node, outputShape shapes.Shape) []*graph.Node {
		if stock != nil && nodeType != graph.NodeTypeSlice && (usesStock(node.Graph()) || !outputShape.IsScalar()) {
			return stock(node, vjps, outputShape)
		}
		grads, err := fn(node, vjps[0])
		if err == nil {
			return grads
		}
		if stock == nil {
			panic(fmt.Sprintf("onegpu: no gradient rule can handle %s: %v", node, err))
		}
		noteFallback(fmt.Sprintf("%s: %v", nodeType, err))
		return stock(node, vjps, outputShape)
	}
}

// noteFallback logs, once per distinct reason, that a node's gradient used GoMLX's own rule.
func noteFallback(reason string) {
	fallbackMu.Lock()
	defer fallbackMu.Unlock()
	if fallbackReasons[reason] {
		return
	}
	fallbackReasons[reason] = true
	log.Printf("onegpu: gradient falls back to GoMLX's rule: %s", reason)
}

// Fallbacks returns the distinct reasons for which a gradient used GoMLX's own rule instead
// of onegpu's since the process started, sorted. Empty means every replaced op was handled.
func Fallbacks() []string {
	fallbackMu.Lock()
	defer fallbackMu.Unlock()
	reasons := make([]string, 0, len(fallbackReasons))
	for r := range fallbackReasons {
		reasons = append(reasons, r)
	}
	sort.Strings(reasons)
	return reasons
}
