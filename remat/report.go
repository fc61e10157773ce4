package remat

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/gomlx/gomlx/pkg/core/graph"

	"github.com/onegpu/onegpu/analysis"
)

// Kinds of residuals.
const (
	// ResidualInput is a float input of the block, kept for the recomputation.
	ResidualInput = "input"
	// ResidualCaptured is a float value the block's function closes over.
	ResidualCaptured = "captured"
	// ResidualSaved is a tagged value the block's policy saves.
	ResidualSaved = "saved"
	// ResidualForward is any other value of the block's forward pass: what a block that is not
	// rematerialized (EverythingSaveable) keeps for its gradients.
	ResidualForward = "forward"
)

// Residual is one value that the backward pass keeps from the forward pass.
type Residual struct {
	// Name is the value's tag (Name, NameDot), "input #N" for the block's N-th input, "captured",
	// or empty.
	Name string `json:"name,omitempty"`
	// Kind is ResidualInput, ResidualCaptured, ResidualSaved or ResidualForward.
	Kind string `json:"kind"`
	// Op is the GoMLX op that computes the value.
	Op    string `json:"op"`
	DType string `json:"dtype"`
	Shape []int  `json:"shape"`
	Bytes int64  `json:"bytes"`
}

// BlockResiduals lists what the backward pass keeps from one checkpointed block.
type BlockResiduals struct {
	// Block is the block's name: Config.Named, the context scope for CheckpointCtx, or
	// "checkpoint N".
	Block  string `json:"block"`
	Policy string `json:"policy"`
	// Rematerialized is false for blocks whose policy saves everything.
	Rematerialized bool       `json:"rematerialized"`
	Residuals      []Residual `json:"residuals"`
	Bytes          int64      `json:"bytes"`
}

// PolicyTotal sums the residuals of the blocks checkpointed with one policy.
type PolicyTotal struct {
	Policy string `json:"policy"`
	Blocks int    `json:"blocks"`
	Bytes  int64  `json:"bytes"`
}

// Report says, for each checkpointed block of a program, which values of its forward pass the
// backward pass keeps: jax.ad_checkpoint.print_saved_residuals for GoMLX graphs. Parameters
// (variables, data inputs) are not listed: they are held for the whole step anyway.
type Report struct {
	Blocks []BlockResiduals `json:"blocks"`
	// Policies sums the blocks by policy, in order of first appearance.
	Policies []PolicyTotal `json:"policies"`
	// BlockBytes sums all blocks' residuals.
	BlockBytes int64 `json:"block_bytes"`
	// OutsideBytes sums the forward values kept by the backward pass that belong to no block
	// (embeddings, heads, losses, layers left unchecked).
	OutsideBytes int64 `json:"outside_bytes"`
}

// Residuals reports what the backward pass of p keeps from the forward pass of each block
// checkpointed in p's graph (nested blocks count within their outer block). It reads the built
// graph, so it reports what really happens: a value is kept when a node of the backward pass (one
// that p.Loss does not depend on) reads it. p must have its Loss set (analysis.ContextProgram sets
// it when the first output is a scalar).
func Residuals(p *analysis.Program) (Report, error) {
	if p == nil || p.Loss == nil {
		return Report{}, fmt.Errorf("remat.Residuals needs the program's loss (Program.Loss) to tell the forward pass from the backward pass")
	}
	nodes := p.Graph.Nodes()
	needed := ancestors(nodes, p.Outputs)
	forward := ancestors(nodes, []*graph.Node{p.Loss})
	kept := map[graph.NodeId]bool{}
	for _, n := range nodes {
		if !needed[n.Id()] || forward[n.Id()] {
			continue
		}
		for _, in := range n.Inputs() {
			if forward[in.Id()] && in.Type() != graph.NodeTypeParameter && in.Type() != graph.NodeTypeConstant {
				kept[in.Id()] = true
			}
		}
	}

	records := recordsOf(p.Graph)
	report := Report{Blocks: make([]BlockResiduals, len(records))}
	for i, rec := range records {
		report.Blocks[i] = BlockResiduals{Block: rec.name, Policy: rec.policy, Rematerialized: rec.rematerialized}
	}
	ids := make([]graph.NodeId, 0, len(kept))
	for id := range kept {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		n := nodes[id]
		if n.NumOutputs() != 1 {
			continue // a multi-output op (a random generator): its outputs are the split nodes that read it
		}
		r := Residual{Op: n.Type().String(), DType: n.DType().String(), Shape: slices.Clone(n.Shape().Dimensions),
			Bytes: int64(n.Shape().Memory())}
		i := owner(records, int(id))
		switch {
		case i >= 0:
			rec := records[i]
			r.Name, r.Kind = rec.tags[id].Name, ResidualForward
			if rec.saved[id] {
				r.Kind = ResidualSaved
			}
		default:
			i, r.Name = inputOwner(records, id)
			if i < 0 {
				report.OutsideBytes += r.Bytes
				continue
			}
			r.Kind = ResidualInput
			if r.Name == "captured" {
				r.Kind = ResidualCaptured
			}
		}
		report.Blocks[i].Residuals = append(report.Blocks[i].Residuals, r)
		report.Blocks[i].Bytes += r.Bytes
		report.BlockBytes += r.Bytes
	}
	for _, b := range report.Blocks {
		j := slices.IndexFunc(report.Policies, func(t PolicyTotal) bool { return t.Policy == b.Policy })
		if j < 0 {
			report.Policies = append(report.Policies, PolicyTotal{Policy: b.Policy})
			j = len(report.Policies) - 1
		}
		report.Policies[j].Blocks++
		report.Policies[j].Bytes += b.Bytes
	}
	return report, nil
}

// owner returns the innermost block whose forward pass created node id, or -1.
func owner(records []*record, id int) int {
	best := -1
	for i, rec := range records {
		if id >= rec.start && id < rec.end && (best < 0 || rec.start >= records[best].start && rec.end <= records[best].end) {
			best = i
		}
	}
	return best
}

// inputOwner returns the first block that takes node id as an input, with its label, or -1.
func inputOwner(records []*record, id graph.NodeId) (int, string) {
	for i, rec := range records {
		if label, ok := rec.inputs[id]; ok {
			return i, label
		}
	}
	return -1, ""
}

// ancestors marks the nodes that roots depend on.
func ancestors(nodes []*graph.Node, roots []*graph.Node) []bool {
	marked := make([]bool, len(nodes))
	stack := slices.Clone(roots)
	for len(stack) > 0 {
		n := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if marked[n.Id()] {
			continue
		}
		marked[n.Id()] = true
		stack = append(stack, n.Inputs()...)
	}
	return marked
}

// WriteTable writes the report as a table: each block's residuals, the block's total, then the
// totals per policy and outside the blocks.
func (r Report) WriteTable(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "BLOCK\tPOLICY\tRESIDUAL\tKIND\tOP\tSHAPE\tBYTES")
	for _, b := range r.Blocks {
		for _, res := range b.Residuals {
			name := res.Name
			if name == "" {
				name = "-"
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s%v\t%s\n", b.Block, b.Policy, name, res.Kind, res.Op, res.DType, res.Shape, analysis.FormatBytes(res.Bytes))
		}
		fmt.Fprintf(tw, "%s\t%s\t(total: %d residuals)\t\t\t\t%s\n", b.Block, b.Policy, len(b.Residuals), analysis.FormatBytes(b.Bytes))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	return r.writeTotals(w)
}

// WriteSummary writes one line per block and the totals per policy and outside the blocks.
func (r Report) WriteSummary(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "BLOCK\tPOLICY\tRESIDUALS\tBYTES")
	for _, b := range r.Blocks {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\n", b.Block, b.Policy, len(b.Residuals), analysis.FormatBytes(b.Bytes))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	return r.writeTotals(w)
}

func (r Report) writeTotals(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "\nPOLICY\tBLOCKS\tBYTES")
	for _, p := range r.Policies {
		fmt.Fprintf(tw, "%s\t%d\t%s\n", p.Policy, p.Blocks, analysis.FormatBytes(p.Bytes))
	}
	fmt.Fprintf(tw, "all blocks\t%d\t%s\n", len(r.Blocks), analysis.FormatBytes(r.BlockBytes))
	fmt.Fprintf(tw, "outside blocks\t\t%s\n", analysis.FormatBytes(r.OutsideBytes))
	return tw.Flush()
}

// String returns the report as WriteTable writes it.
func (r Report) String() string {
	var sb strings.Builder
	_ = r.WriteTable(&sb)
	return sb.String()
}
