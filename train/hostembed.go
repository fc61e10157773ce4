package train

import (
	"fmt"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/gomlx/gomlx/pkg/ml/context"

	"github.com/onegpu/onegpu/analysis"
	"github.com/onegpu/onegpu/layers"
	"github.com/onegpu/onegpu/optim/hostengine"
)

// The input embedding's rows gathered in host memory. A LoRA run freezes the embedding table, and
// an untied one (Llama-3.1-8B's: 128,256 × 4,096, 1 GiB in bfloat16) is read by the embedding
// stage only, one row per token: the trainer keeps the table in host memory, runs the model's
// embedding stage there on each batch (on the host backend, hostengine.NewBackend), and gives the
// device step its output, [batch, length, hidden], in place of the tokens. The device never holds
// the table. The host computes in the table's dtype and the device casts to the compute dtype, as
// the lookup would on the device (a gather, then the cast): the same values on every backend.
//
// It applies to a LoRA run of a Staged model on one device (the plain and the offloaded-optimizer
// executors) whose embedding stage reads weights only, none of them an adapter nor read by another
// stage (an untied table: tied embeddings are the head's weight too, which the device needs).

// hostEmbedding is what the trainer knows of the embedding gathered on the host.
type hostEmbedding struct {
	on    bool         // the run gathers the embedding on the host
	shape shapes.Shape // the embedding stage's output, in the base's dtype: the step's first input
	// host runs the embedding stage on the host backend, created at the first step.
	host backends.Backend
	exec *context.Exec
}

// embedding returns what the trainer knows of its host embedding, finding it out on first use
// (two small graphs are built in throwaway contexts: nothing is compiled).
func (t *Trainer) embedding() *hostEmbedding {
	if t.embed == nil {
		t.embed = &hostEmbedding{}
		if on, shape, err := t.embedsOnHost(); err == nil && on {
			t.embed.on, t.embed.shape = true, shape
		}
	}
	return t.embed
}

// EmbeddingOnHost reports whether the run gathers the input embedding's rows in host memory (see
// hostembed.go): a LoRA run of a Staged model with an untied embedding table, on one device.
func (t *Trainer) EmbeddingOnHost() bool { return t.embedding().on }

// embedsOnHost builds the embedding stage and the head stage in throwaway contexts and reports
// whether the embedding can run on the host, and its output's shape.
func (t *Trainer) embedsOnHost() (bool, shapes.Shape, error) {
	m, ok := t.Config.Model.(Staged)
	c := t.Config
	if !ok || !c.LoRA.Active() || c.Offload.staged() || c.Devices.Distributed() {
		return false, shapes.Shape{}, nil
	}
	embedCtx := context.New()
	embed, err := analysis.ContextProgram(t.Backend, embedCtx, "embedding", t.InputShapes(), t.hostEmbedFn(m))
	if err != nil {
		return false, shapes.Shape{}, err
	}
	shape := embed.Outputs[0].Shape()
	embed.Graph.Finalize()
	read := map[string]bool{}
	for v := range embedCtx.IterVariables() {
		if !analysis.IsWeight(embedCtx, v) || layers.IsAdapter(v) {
			return false, shape, nil // it reads state, or trains
		}
		read[v.ScopeAndName()] = true
	}
	if len(read) == 0 {
		return false, shape, nil
	}
	headCtx := context.New()
	head, err := analysis.ContextProgram(t.Backend, headCtx, "head", append([]shapes.Shape{shape}, t.InputShapes()...),
		func(ctx *context.Context, inputs []*graph.Node) []*graph.Node {
			c.Settings().Apply(ctx, inputs[0].Graph())
			loss, _ := m.HeadStage(ctx, inputs[0], inputs[1:])
			return []*graph.Node{loss.Sum}
		})
	if err != nil {
		return false, shape, err
	}
	head.Graph.Finalize()
	for v := range headCtx.IterVariables() {
		if read[v.ScopeAndName()] {
			return false, shape, nil // tied: the head reads the table too
		}
	}
	return true, shape, nil
}

// hostEmbedFn is the embedding stage as the host computes it: the run's settings, but computing in
// the base's dtype (the table's), so that the device's cast is the only rounding.
func (t *Trainer) hostEmbedFn(m Staged) func(ctx *context.Context, batch []*graph.Node) []*graph.Node {
	settings := t.Config.Settings()
	settings.Policy.Compute, settings.Policy.Output = t.Config.WeightDType(), t.Config.WeightDType()
	return func(ctx *context.Context, batch []*graph.Node) []*graph.Node {
		settings.Apply(ctx, batch[0].Graph())
		return []*graph.Node{m.EmbedStage(ctx, batch)}
	}
}

// StepShapes are the shapes of the step program's inputs: InputShapes, but with the embedding
// gathered on the host (EmbeddingOnHost) the first is the embedding stage's output.
func (t *Trainer) StepShapes() []shapes.Shape {
	s := t.InputShapes()
	if e := t.embedding(); e.on {
		s[0] = e.shape
	}
	return s
}

// embedOnHost returns the step's inputs for batch: batch itself, or with the embedding on the host
// its first tensor replaced by the embedding stage's output, computed on the host backend.
func (t *Trainer) embedOnHost(batch []*tensors.Tensor) ([]*tensors.Tensor, error) {
	e := t.embedding()
	if !e.on {
		return batch, nil
	}
	if e.exec == nil {
		host, err := e.backend()
		if err != nil {
			return nil, err
		}
		exec, err := context.NewExec(host, t.Ctx.Checked(false), t.hostEmbedFn(t.Config.Model.(Staged)))
		if err != nil {
			return nil, err
		}
		e.exec = exec.WithName("host_embedding")
	}
	// The host program gets copies: a tensor is bound to the backend that used it, and the device
	// step reads the batch too.
	copies := make([]*tensors.Tensor, len(batch))
	for i, b := range batch {
		c, err := b.LocalClone()
		if err != nil {
			return nil, err
		}
		copies[i] = c
	}
	outs, err := e.exec.Exec(args(copies)...)
	for _, c := range copies {
		c.FinalizeAll()
	}
	if err != nil {
		return nil, fmt.Errorf("the embedding on the host: %w", err)
	}
	if err := outs[0].ToLocal(); err != nil {
		return nil, err
	}
	return append([]*tensors.Tensor{outs[0]}, batch[1:]...), nil
}

// backend returns the host backend, created on first use.
func (e *hostEmbedding) backend() (backends.Backend, error) {
	if e.host == nil {
		host, _, err := hostengine.NewBackend()
		if err != nil {
			return nil, fmt.Errorf("the embedding on the host: %w", err)
		}
		e.host = host
	}
	return e.host, nil
}

// createTable creates the embedding stage's variables in t.Ctx and initializes them on the host
// backend (from the seed), so that the table never reaches the device.
func (t *Trainer) createTable() error {
	e := t.embedding()
	host, err := e.backend()
	if err != nil {
		return err
	}
	p, err := analysis.ContextProgram(host, t.Ctx, "embedding", t.InputShapes(), t.hostEmbedFn(t.Config.Model.(Staged)))
	if err != nil {
		return fmt.Errorf("building the embedding: %w", err)
	}
	p.Graph.Finalize()
	if err := t.Ctx.InitializeVariables(host, nil); err != nil {
		return fmt.Errorf("initializing the embedding on the host: %w", err)
	}
	return nil
}

// close releases the host program and backend.
func (e *hostEmbedding) close() {
	if e == nil {
		return
	}
	if e.exec != nil {
		e.exec.Finalize()
	}
	if e.host != nil {
		e.host.Finalize()
	}
	e.exec, e.host = nil, nil
}
