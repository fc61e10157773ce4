package hostengine

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/gomlx/gomlx/pkg/ml/context"

	"github.com/onegpu/onegpu/internal/testkit"
	"github.com/onegpu/onegpu/mixed"
	"github.com/onegpu/onegpu/optim"
)

// newBlocksContext returns a context of n blocks with the same variables (a model's layers),
// seeded values.
func newBlocksContext(n int) *context.Context {
	r := rand.New(rand.NewPCG(5, 11))
	ctx := context.New()
	for i := range n {
		for _, tv := range []struct {
			scope, name string
			dims        []int
		}{{"dense", "kernel", []int{64, 48}}, {"dense", "bias", []int{48}}, {"norm", "gain", []int{48}}} {
			values := make([]float32, size(tv.dims))
			for j := range values {
				values[j] = float32(r.NormFloat64() * 0.1)
			}
			ctx.InAbsPath(fmt.Sprintf("/layers/%d/%s", i, tv.scope)).VariableWithValue(tv.name, tensors.FromFlatDataAndDimensions(values, tv.dims...))
		}
	}
	return ctx
}

func size(dims []int) int {
	n := 1
	for _, d := range dims {
		n *= d
	}
	return n
}

// blockVariables are ctx's variables of block i, in context order.
func blockVariables(ctx *context.Context, i int) []*context.Variable {
	var vars []*context.Variable
	prefix := fmt.Sprintf("/layers/%d/", i)
	for v := range ctx.IterVariables() {
		if strings.HasPrefix(v.Scope()+"/", prefix) {
			vars = append(vars, v)
		}
	}
	return vars
}

// TestStageLikeIsItsOwnProgram: three blocks updated through the first block's program
// (StageLike: their variables and optimizer state bound in its place) end every step with the
// same bits as three stages with programs of their own, for every optimizer (factored Adafactor
// moments, 8-bit Adam's codes), on the embedded backend and XLA, under a chain with a loss scale
// and an active clip whose partial results are computed where the gradients are (OnDevice); the
// step with a NaN gradient is skipped by both.
func TestStageLikeIsItsOwnProgram(t *testing.T) {
	schedule := optim.WarmupCosine(1e-4, 1e-2, 2, 10, 1e-3)
	const blocks, steps, nanStep, denominator = 3, 4, 2, 8
	for _, backend := range testkit.All() {
		for name, opt := range testOptimizers {
			t.Run(backend.Name()+"/"+name, func(t *testing.T) {
				newChain := func() *optim.Chain {
					chain, err := optim.NewChain(optim.LossScale(mixed.NewDynamicLossScale().Initial(1024)), optim.ClipByGlobalNorm(0.05), optim.Apply(opt()))
					if err != nil {
						t.Fatal(err)
					}
					return chain
				}
				run := func(like bool) *context.Context {
					ctx := newBlocksContext(blocks)
					engine, err := New(Config{Backend: backend, Ctx: ctx, Chain: newChain(), Schedule: schedule, NoParams: true, OnDevice: true})
					if err != nil {
						t.Fatal(err)
					}
					defer engine.Close()
					stages := make([]*Stage, blocks)
					for i := range blocks {
						if i > 0 && like {
							stages[i], err = engine.StageLike(fmt.Sprintf("block_%d", i), blockVariables(ctx, i), stages[0])
						} else {
							stages[i], err = engine.Stage(fmt.Sprintf("block_%d", i), blockVariables(ctx, i))
						}
						if err != nil {
							t.Fatal(err)
						}
					}
					for step := range steps {
						grads := onDevice(t, backend, chainGradients(ctx, step, 1024, denominator, nanStep))
						st, err := engine.Begin(denominator)
						if err != nil {
							t.Fatal(err)
						}
						for i := blocks - 1; i >= 0; i-- {
							if err := st.Check(stages[i], stageGradients(stages[i], grads)); err != nil {
								t.Fatal(err)
							}
						}
						apply, err := st.Decide()
						if err != nil {
							t.Fatal(err)
						}
						if apply == (step == nanStep) {
							t.Fatalf("step %d applies: %v", step, apply)
						}
						for i := blocks - 1; apply && i >= 0; i-- {
							if _, err := st.Update(stages[i], stageGradients(stages[i], grads)); err != nil {
								t.Fatal(err)
							}
						}
						if err := st.Finish(); err != nil {
							t.Fatal(err)
						}
					}
					return ctx
				}
				want, got := testkit.Variables(t, run(false)), testkit.Variables(t, run(true))
				if len(got) != len(want) {
					t.Fatalf("%d variables, want %d: %v", len(got), len(want), keys(got))
				}
				for v, w := range want {
					g, ok := got[v]
					if !ok {
						t.Fatalf("no variable %s", v)
					}
					assertSame(t, g, w)
				}
			})
		}
	}
}

// onDevice sends the gradients to backend's first device.
func onDevice(t *testing.T, backend backends.Backend, grads map[*context.Variable]*tensors.Tensor) map[*context.Variable]*tensors.Tensor {
	t.Helper()
	for v, g := range grads {
		d, err := g.OnDeviceClone(backend, 0)
		if err != nil {
			t.Fatal(err)
		}
		grads[v] = d
	}
	return grads
}

// TestStageLikeRefusesOtherVariables: a stage of other shapes than the one it runs like is
// refused, naming both.
func TestStageLikeRefusesOtherVariables(t *testing.T) {
	ctx := newBlocksContext(1)
	other := ctx.InAbsPath("/other/dense").VariableWithValue("kernel", tensors.FromShape(blockVariables(ctx, 0)[0].Shape()))
	engine, err := New(Config{Backend: testkit.Embedded(), Ctx: ctx, Optimizer: optim.Adam().Done(), NoParams: true, OnDevice: true})
	if err != nil {
		t.Fatal(err)
	}
	defer engine.Close()
	block, err := engine.Stage("block_0", blockVariables(ctx, 0))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := engine.StageLike("other", []*context.Variable{other}, block); err == nil || !strings.Contains(err.Error(), "block_0") {
		t.Errorf("a stage of one variable run like a block of three: %v, want an error naming block_0", err)
	} else {
		t.Log(err)
	}
}
