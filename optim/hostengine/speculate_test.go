package hostengine

import (
	"fmt"
	"math"
	"testing"

	"github.com/gomlx/gomlx/pkg/ml/context"

	"github.com/onegpu/onegpu/internal/testkit"
	"github.com/onegpu/onegpu/mixed"
	"github.com/onegpu/onegpu/optim"
)

// TestSpeculatedStepIsTheSerialOne: stages updated as their gradients arrive (Speculate), before
// Decide knows whether the step applies and how much it clips, leave every variable as the
// serialized step (Check all, Decide, Update all) does, bit for bit, under a dynamic loss scale
// whose last step has a NaN gradient in the second stage (skipped: the first stage's speculated
// update put back), with a global-norm clip that never acts (every speculation stands), one that
// acts on every step where the first stage's norm is below it (its update undone and done again
// with the factor), or none; for the flat loops and the graph updates.
func TestSpeculatedStepIsTheSerialOne(t *testing.T) {
	schedule := optim.WarmupCosine(1e-4, 1e-2, 2, 10, 1e-3)
	const steps, nanStep, denominator = 4, 3, 8 // the skipped step last: the scale is 1024 throughout
	// The acting clip: above the first stage's norm, below the whole step's, at every step.
	var firstMax, wholeMin float64 = 0, math.Inf(1)
	{
		ctx := newTestContext()
		engine, err := New(Config{Backend: testkit.Embedded(), Ctx: ctx, Optimizer: optim.Adam().Done()})
		if err != nil {
			t.Fatal(err)
		}
		stages := stagesOf(t, engine, ctx)
		for step := range steps {
			grads := chainGradients(ctx, step, 1024, denominator, -1)
			var whole float64
			for i, s := range stages {
				_, squares, err := Scaling{Denominator: denominator, LossScale: 1024}.Partials(stageGradients(s, grads))
				if err != nil {
					t.Fatal(err)
				}
				for _, x := range squares {
					whole += float64(x)
					if i == 0 {
						firstMax = max(firstMax, float64(x))
					}
				}
			}
			wholeMin = min(wholeMin, whole)
		}
		engine.Close()
		if !(firstMax < wholeMin) {
			t.Fatalf("the first stage's squares (up to %g) reach the step's (%g): no clip acts between", firstMax, wholeMin)
		}
	}
	acting := math.Sqrt((firstMax + wholeMin) / 2)
	for _, clip := range []float64{0, 1e6, acting} {
		for name, opt := range testOptimizers {
			for _, graphUpdate := range []bool{false, true} {
				t.Run(fmt.Sprintf("clip%g/%s/graph%v", clip, name, graphUpdate), func(t *testing.T) {
					newEngine := func(ctx *context.Context) (*Engine, []*Stage) {
						links := []optim.Transform{optim.LossScale(mixed.NewDynamicLossScale().Initial(1024))}
						if clip > 0 {
							links = append(links, optim.ClipByGlobalNorm(clip))
						}
						chain, err := optim.NewChain(append(links, optim.Apply(opt()))...)
						if err != nil {
							t.Fatal(err)
						}
						engine, err := New(Config{Backend: testkit.Embedded(), Ctx: ctx, Chain: chain, Schedule: schedule, NoParams: true, GraphUpdate: graphUpdate})
						if err != nil {
							t.Fatal(err)
						}
						return engine, stagesOf(t, engine, ctx)
					}
					serial, speculated := newTestContext(), newTestContext()
					se, sStages := newEngine(serial)
					pe, pStages := newEngine(speculated)
					defer se.Close()
					defer pe.Close()
					stood, speculations := 0, 0
					for step := range steps {
						// The serialized step.
						grads := chainGradients(serial, step, 1024, denominator, nanStep)
						st, err := se.Begin(denominator)
						if err != nil {
							t.Fatal(err)
						}
						for _, s := range sStages {
							if err := st.Check(s, stageGradients(s, grads)); err != nil {
								t.Fatal(err)
							}
						}
						apply, err := st.Decide()
						for _, s := range sStages {
							if err == nil && apply {
								_, err = st.Update(s, stageGradients(s, grads))
							}
						}
						if err != nil || st.Finish() != nil {
							t.Fatal(err)
						}
						// The speculated step: the stages saved ahead but the first.
						grads = chainGradients(speculated, step, 1024, denominator, nanStep)
						if st, err = pe.Begin(denominator); err != nil {
							t.Fatal(err)
						}
						for _, s := range pStages[:len(pStages)-1] {
							if err := s.Save(); err != nil {
								t.Fatal(err)
							}
						}
						for _, s := range pStages {
							if err := st.Check(s, stageGradients(s, grads)); err != nil {
								t.Fatal(err)
							}
							ok, _, err := st.Speculate(s, stageGradients(s, grads))
							if err != nil {
								t.Fatal(err)
							}
							if ok {
								speculations++
							}
						}
						if apply, err = st.Decide(); err != nil {
							t.Fatal(err)
						}
						for _, s := range pStages {
							if st.Updated(s) {
								stood++
							} else if apply {
								if _, err := st.Update(s, stageGradients(s, grads)); err != nil {
									t.Fatal(err)
								}
							}
						}
						if err := st.Finish(); err != nil {
							t.Fatal(err)
						}
					}
					want, got := testkit.Variables(t, serial), testkit.Variables(t, speculated)
					for v, w := range want {
						assertSame(t, got[v], w)
					}
					// The first stage speculates at every step, the second where its gradients are finite
					// and the clip does not act.
					if want := map[float64]int{0: steps + steps - 1, 1e6: steps + steps - 1, acting: steps}[clip]; speculations != want {
						t.Errorf("%d speculated updates, want %d", speculations, want)
					}
					// Speculations stand in the applied steps the clip leaves alone.
					if wantStood := map[float64]int{0: 2 * (steps - 1), 1e6: 2 * (steps - 1), acting: 0}[clip]; stood != wantStood {
						t.Errorf("%d speculated updates stood, want %d", stood, wantStood)
					}
				})
			}
		}
	}
}
