package train

import (
	"fmt"
	"slices"
	"sync"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/dtypes/bfloat16"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/gomlx/gomlx/pkg/ml/context"

	"github.com/onegpu/onegpu/optim"
)

// Weights over the bus in the compute dtype. Under a bfloat16 compute policy a stage's program
// converts most float32 weights to bfloat16 where it reads them; only those go over the bus, as a
// bfloat16 copy of the float32 master (rounded to nearest, ties to even, as the device converts),
// half the bytes. The device widens them back to float32 (exactly) for the stage's programs, which
// stay as compiled: their conversion gives the bfloat16 the copy holds, so the step computes what
// it computed with float32 uploads, bit for bit. A weight the program reads otherwise (a float32
// island's norm gain, an embedding table's gather) goes as it is. The host converts a weight once
// per step, before its first upload (the masters change only in the host update, after the stage's
// last upload of the step).

// narrowVariables returns the float32 variables of vars that g reads only converted to compute
// (bfloat16), directly or after moving their values (a gather of an embedding table's rows, a
// slice, a reshape, ...: the conversion then commutes with the move): what the bus may carry in
// compute, the program computing from the rounded values only.
func narrowVariables(g *graph.Graph, vars []*context.Variable, compute dtypes.DType) map[*context.Variable]bool {
	if compute != dtypes.BFloat16 {
		return nil // float16 copies would need their own rounding; float32 is what is stored
	}
	users := map[*graph.Node][]*graph.Node{}
	for _, n := range g.Nodes() {
		for _, in := range n.Inputs() {
			users[in] = append(users[in], n)
		}
	}
	narrow := map[*context.Variable]bool{}
	for _, v := range vars {
		if v.DType() == dtypes.Float32 && v.InUseByGraph(g) && readsRounded(v.ValueGraph(g), users, compute) {
			narrow[v] = true
		}
	}
	return narrow
}

// moves are the operations that only move their first operand's values: converting their result
// is converting the operand.
var moves = map[graph.NodeType]bool{
	graph.NodeTypeGather: true, graph.NodeTypeSlice: true, graph.NodeTypeDynamicSlice: true, graph.NodeTypeReshape: true,
	graph.NodeTypeTranspose: true, graph.NodeTypeBroadcastInDim: true, graph.NodeTypeIdentity: true,
}

// neverTrue reports whether c is a constant whose every element is false.
func neverTrue(c *graph.Node) bool {
	if c.Type() != graph.NodeTypeConstant || c.DType() != dtypes.Bool {
		return false
	}
	never := true
	c.ConstantValue().ConstFlatData(func(flat any) { never = !slices.Contains(flat.([]bool), true) })
	return never
}

// readsRounded reports whether every use of n (a float32 value) converts it to compute, directly
// or after moves, or not at all (the branch a constant false condition never selects); a value
// without uses is a program output, read as it is.
func readsRounded(n *graph.Node, users map[*graph.Node][]*graph.Node, compute dtypes.DType) bool {
	if len(users[n]) == 0 {
		return false
	}
	for _, u := range users[n] {
		switch {
		case u.Type() == graph.NodeTypeConvertDType && u.DType() == compute:
		case moves[u.Type()] && u.Inputs()[0] == n && !slices.Contains(u.Inputs()[1:], n) && readsRounded(u, users, compute):
		case u.Type() == graph.NodeTypeWhere && neverTrue(u.Inputs()[0]) && u.Inputs()[0] != n && u.Inputs()[2] != n:
			// never selected: remat's ties (remat/block.go) give the gradient a path without a value
		default:
			return false
		}
	}
	return true
}

// narrowAt says, by position in sources (an instance's: the embedding's, a block's, the head's),
// which go over the bus in the compute dtype.
func (s *streamExecutor) narrowAt(sources []*context.Variable) []bool {
	name, first := "head", s.headVars
	switch {
	case sameSources(sources, s.embedVars):
		name, first = "embed", s.embedVars
	case !sameSources(sources, s.headVars):
		name, first = s.model.BlockScope(0), s.blockVars[0]
	}
	at := make([]bool, len(sources))
	for j, v := range first {
		at[j] = s.narrow[name][v]
	}
	return at
}

// narrowCopies are the host's compute-dtype copies of the masters, made once per step.
type narrowCopies struct {
	mu     sync.Mutex
	step   int
	copies map[*context.Variable]*narrowCopy
	widen  *graph.Exec
}

type narrowCopy struct {
	value *tensors.Tensor
	step  int
}

// of returns v's bfloat16 copy, converting the master if this step has not.
func (c *narrowCopies) of(v *context.Variable) (*tensors.Tensor, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	cp := c.copies[v]
	if cp == nil {
		cp = &narrowCopy{value: tensors.FromShape(shapes.Make(dtypes.BFloat16, v.Shape().Dimensions...)), step: -1}
		c.copies[v] = cp
	}
	if cp.step == c.step {
		return cp.value, nil
	}
	master, err := v.Value()
	if err != nil {
		return nil, err
	}
	master.ConstFlatData(func(flat any) {
		src, ok := flat.([]float32)
		if !ok {
			err = fmt.Errorf("%s is %s, not float32", v.ScopeAndName(), master.DType())
			return
		}
		cp.value.MutableFlatData(func(dst any) { optim.BFloat16Nearest(dst.([]bfloat16.BFloat16), src) })
	})
	if err != nil {
		return nil, err
	}
	cp.step = c.step
	return cp.value, nil
}

// newNarrowCopies returns the copies of the masters the stages read in the compute dtype, and the
// program that widens them on the device; nil when no stage reads any so.
func (s *streamExecutor) newNarrowCopies() (*narrowCopies, error) {
	some := false
	for _, vs := range s.narrow {
		some = some || len(vs) > 0
	}
	if !some {
		return nil, nil
	}
	widen, err := graph.NewExec(s.t.Backend, func(x *graph.Node) *graph.Node { return graph.ConvertDType(x, dtypes.Float32) })
	if err != nil {
		return nil, fmt.Errorf("Config.Offload params: the program widening the bfloat16 weights: %w", err)
	}
	return &narrowCopies{copies: map[*context.Variable]*narrowCopy{}, widen: widen.WithName("stream_widen")}, nil
}

// sendNarrow sends the sources marked narrow (at) as their bfloat16 copies and widens them on the
// device into clones, one at a time (the device holds one bfloat16 copy beside the float32 values:
// narrowTransient); it returns the bytes sent.
func (s *streamExecutor) sendNarrow(sources []*context.Variable, at []bool, clones []*tensors.Tensor) (int64, error) {
	var sent int64
	for j, src := range sources {
		if !at[j] {
			continue
		}
		host, err := s.copies.of(src)
		var dev *tensors.Tensor
		if err == nil {
			dev, err = host.OnDeviceClone(s.t.Backend, 0)
		}
		if err != nil {
			return sent, fmt.Errorf("sending %s to the device in bfloat16: %w", src.ScopeAndName(), err)
		}
		sent += int64(dev.Memory())
		wide, err := s.copies.widen.Exec(dev)
		dev.FinalizeAll()
		if err != nil {
			return sent, fmt.Errorf("widening %s on the device: %w", src.ScopeAndName(), err)
		}
		clones[j] = wide[0]
	}
	return sent, nil
}

// narrowTransient is the device bytes an upload of sources holds beside their float32 values: the
// largest bfloat16 copy, until widened.
func narrowTransient(sources []*context.Variable, at []bool) int64 {
	var most int64
	for j, src := range sources {
		if at[j] {
			most = max(most, int64(src.Shape().Memory())/2)
		}
	}
	return most
}

// next starts a step: every copy is converted again before its first upload.
func (c *narrowCopies) next() {
	c.mu.Lock()
	c.step++
	c.mu.Unlock()
}

// close frees the copies and the widening program.
func (c *narrowCopies) close() {
	for _, cp := range c.copies {
		cp.value.FinalizeAll()
	}
	if c.widen != nil {
		c.widen.Finalize()
	}
	c.copies, c.widen = nil, nil
}
