package remat

import (
	"encoding/json"
	"fmt"
	"runtime"
	"slices"
	"sort"
	"strings"
	"sync"

	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/ml/context"

	"github.com/onegpu/onegpu/analysis"
)

// blocksParam is the context hyperparameter that holds the blocks SetBlocks names.
const blocksParam = "remat_blocks"

// namedBlocks is what SetBlocks stores on a scope. GoMLX's checkpoints save a context's
// parameters as JSON: MarshalText writes it as one JSON string, which blocksOf reads back.
type namedBlocks struct {
	names  []string
	config Config
}

// namedBlocksJSON is namedBlocks' text form.
type namedBlocksJSON struct {
	Blocks     []string `json:"blocks"`
	Policy     string   `json:"policy"`
	PreventCSE bool     `json:"prevent_cse"`
	Name       string   `json:"name,omitempty"`
}

// MarshalText writes the blocks and their config as JSON text.
func (b namedBlocks) MarshalText() ([]byte, error) {
	return json.Marshal(namedBlocksJSON{Blocks: b.names, Policy: b.config.policy.String(), PreventCSE: !b.config.allowCSE,
		Name: b.config.name})
}

// UnmarshalText reads what MarshalText wrote.
func (b *namedBlocks) UnmarshalText(text []byte) error {
	var j namedBlocksJSON
	if err := json.Unmarshal(text, &j); err != nil {
		return fmt.Errorf("remat blocks %q: %w", text, err)
	}
	policy, err := ParsePolicy(j.Policy)
	if err != nil {
		return fmt.Errorf("remat blocks %q: %w", text, err)
	}
	*b = namedBlocks{names: j.Blocks, config: With(policy).PreventCSE(j.PreventCSE).Named(j.Name)}
	return nil
}

// blocksOf returns the blocks set on ctx's scope or above: what SetBlocks stored, or its JSON
// decoding in a context restored from a GoMLX checkpoint (the string MarshalText wrote; an empty
// map from checkpoints written before namedBlocks had it, which held no names: no blocks).
func blocksOf(ctx *context.Context) namedBlocks {
	value, found := ctx.GetParam(blocksParam)
	if !found || value == nil {
		return namedBlocks{}
	}
	switch v := value.(type) {
	case namedBlocks:
		return v
	case string:
		var b namedBlocks
		if err := b.UnmarshalText([]byte(v)); err != nil {
			panic(fmt.Errorf("remat.Block (scope %q): %w", ctx.Scope(), err))
		}
		return b
	case map[string]any:
		if len(v) == 0 {
			return namedBlocks{}
		}
	}
	panic(fmt.Errorf("remat.Block (scope %q): the context's remat blocks are a %T (%v), not what remat.SetBlocks stores",
		ctx.Scope(), value, value))
}

// SetBlocks names the kinds of block (the names a model gives Block) that are rematerialized
// below ctx's scope, with config's policy: the trainer's way to apply remat to a model it does not
// know, and the user's way to switch it per run. No names switches it off.
//
//	remat.SetBlocks(ctx, remat.With(remat.NothingSaveable), "block")
func SetBlocks(ctx *context.Context, config Config, names ...string) {
	ctx.SetParam(blocksParam, namedBlocks{names: slices.Clone(names), config: config})
}

// Block runs fn(ctx, inputs) as the block kind name: rematerialized (CheckpointCtx, with the
// policy SetBlocks gave) when SetBlocks named it on ctx's scope or above, plainly otherwise. A model
// marks its blocks with it once, and the choice of what to rematerialize stays with the run.
//
//	for i := range layers {
//		c := ctx.In(fmt.Sprintf("block_%d", i))
//		x = graph.Add(x, remat.Block(c, "block", residualBranch, x)[0])
//	}
func Block(ctx *context.Context, name string, fn func(ctx *context.Context, inputs []*graph.Node) []*graph.Node,
	inputs ...*graph.Node) []*graph.Node {
	if name == "" {
		panic(fmt.Errorf("remat.Block: the block needs a name (the kind SetBlocks selects, e.g. \"block\")"))
	}
	if len(inputs) > 0 && inputs[0] != nil {
		recordKind(inputs[0].Graph(), name)
	}
	blocks := blocksOf(ctx)
	if !slices.Contains(blocks.names, name) {
		if len(inputs) > 0 && inputs[0] != nil {
			defer analysis.Section(inputs[0].Graph(), sectionLabel(ctx.Scope()))()
		}
		return fn(ctx, inputs)
	}
	return blocks.config.CheckpointCtx(ctx, fn, inputs...)
}

// kindsBuilt records, per graph, the kinds of block Block was called with, so that a kind asked
// for and never built can be reported (BlockKinds). Entries go when the graph is garbage collected.
var kindsBuilt = struct {
	sync.Mutex
	graphs map[graph.GraphId]map[string]bool
}{graphs: map[graph.GraphId]map[string]bool{}}

func recordKind(g *graph.Graph, kind string) {
	kindsBuilt.Lock()
	defer kindsBuilt.Unlock()
	kinds, known := kindsBuilt.graphs[g.GraphId()]
	if !known {
		kinds = map[string]bool{}
		kindsBuilt.graphs[g.GraphId()] = kinds
		runtime.AddCleanup(g, func(id graph.GraphId) {
			kindsBuilt.Lock()
			defer kindsBuilt.Unlock()
			delete(kindsBuilt.graphs, id)
		}, g.GraphId())
	}
	kinds[kind] = true
}

// BlockKinds returns the kinds of block (the names given to Block) built in g so far, whether
// rematerialized or not, sorted. A trainer compares them with the kinds a run asks for, so that a
// misspelt kind is an error instead of a run without remat.
func BlockKinds(g *graph.Graph) []string {
	kindsBuilt.Lock()
	defer kindsBuilt.Unlock()
	var kinds []string
	for k := range kindsBuilt.graphs[g.GraphId()] {
		kinds = append(kinds, k)
	}
	sort.Strings(kinds)
	return kinds
}

// MissingKinds returns the kinds of wanted that no Block of g was built with, and an error naming
// them and the kinds g has (nil when every kind is there): what a trainer reports for a kind its
// model does not mark.
func MissingKinds(g *graph.Graph, wanted []string) error {
	have := BlockKinds(g)
	var missing []string
	for _, k := range wanted {
		if !slices.Contains(have, k) {
			missing = append(missing, k)
		}
	}
	if len(missing) == 0 {
		return nil
	}
	if len(have) == 0 {
		return fmt.Errorf("remat %s: the model marks no block with remat.Block, so nothing can be rematerialized; use remat none", strings.Join(missing, ","))
	}
	return fmt.Errorf("remat %s: the model has no block of that kind; its kinds are %s", strings.Join(missing, ","), strings.Join(have, ", "))
}
