package layers

import (
	"fmt"
	"io"
	"sort"
	"strings"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/ml/context"

	"github.com/onegpu/onegpu/internal/panics"
)

// Summary describes a model layer by layer, like Flax's tabulate: each layer's output shape and
// dtype under the policy, and the parameters it owns with their shapes and dtypes.
type Summary struct {
	Rows []SummaryRow `json:"layers"`
	// Params and ParamBytes total the model's trainable parameters.
	Params     int64 `json:"params"`
	ParamBytes int64 `json:"param_bytes"`
}

// SummaryRow is one layer of a Summary.
type SummaryRow struct {
	Path   string      `json:"path"`   // the layer's context scope, e.g. "/block_0/attn/qkv"
	Layer  string      `json:"layer"`  // Dense, LayerNorm, Embed, Attention, ...
	Output string      `json:"output"` // shape and dtype of the layer's output
	Params []ParamInfo `json:"params"`
}

// ParamInfo is one parameter of a layer.
type ParamInfo struct {
	Name  string `json:"name"`
	Shape string `json:"shape"`
	Size  int64  `json:"size"`
}

const summaryKey = "onegpu.layers.summary"

// Note records out as the output of a layer named layer (Dense, LayerNorm, ...) at ctx's scope in
// the summary Summarize is building for out's graph, if any, and returns out. A model's own layers
// call it to appear in the summary.
func Note(ctx *context.Context, layer string, out *graph.Node) *graph.Node {
	if s, ok := ctx.GetGraphParam(out.Graph(), summaryKey); ok {
		s := s.(*Summary)
		s.Rows = append(s.Rows, SummaryRow{Path: ctx.Scope(), Layer: layer, Output: out.Shape().String()})
	}
	return out
}

// Summarize builds forward(ctx, g) on backend without running it and returns the summary of the
// layers it calls. Variables are created in a fresh context.
func Summarize(backend backends.Backend, forward func(ctx *context.Context, g *graph.Graph)) (*Summary, error) {
	ctx := context.New()
	s := &Summary{}
	g := graph.NewGraph(backend, "summary")
	defer g.Finalize()
	err := panics.Catch(func() {
		ctx.SetGraphParam(g, summaryKey, s)
		forward(ctx, g)
	})
	if err != nil {
		return nil, err
	}
	byScope := map[string][]ParamInfo{}
	for v := range ctx.IterVariables() {
		if !v.Trainable {
			continue
		}
		size := int64(v.Shape().Size())
		s.Params += size
		s.ParamBytes += int64(v.Shape().Memory())
		byScope[v.Scope()] = append(byScope[v.Scope()], ParamInfo{Name: v.Name(), Shape: v.Shape().String(), Size: size})
	}
	seen := map[string]bool{}
	for i, r := range s.Rows {
		if !seen[r.Path] {
			s.Rows[i].Params, seen[r.Path] = byScope[r.Path], true
		}
	}
	for scope, params := range byScope { // parameters created outside a noted layer (e.g. pos_emb)
		if !seen[scope] {
			s.Rows = append(s.Rows, SummaryRow{Path: scope, Layer: "Param", Params: params})
		}
	}
	return s, nil
}

// WriteTable writes the summary as a table.
func (s *Summary) WriteTable(w io.Writer) {
	fmt.Fprintf(w, "%-34s %-20s %-28s %s\n", "path", "layer", "output", "parameters")
	for _, r := range s.Rows {
		var params []string
		for _, p := range r.Params {
			params = append(params, fmt.Sprintf("%s %s", p.Name, p.Shape))
		}
		sort.Strings(params)
		fmt.Fprintf(w, "%-34s %-20s %-28s %s\n", r.Path, r.Layer, r.Output, strings.Join(params, ", "))
	}
	fmt.Fprintf(w, "total: %d parameters, %d bytes\n", s.Params, s.ParamBytes)
}
