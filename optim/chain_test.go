package optim_test

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/gomlx/gomlx/pkg/ml/context"
	"github.com/gomlx/gomlx/pkg/ml/train/optimizers"

	"github.com/onegpu/onegpu/accum"
	"github.com/onegpu/onegpu/internal/testkit"
	"github.com/onegpu/onegpu/mixed"
	"github.com/onegpu/onegpu/optim"
)

// The five links a user chains, by letter: M MicroBatches(2), L LossScale(dynamic), C
// ClipByGlobalNorm(0.5), S MultiSteps(2), A Apply(SGD).
const (
	microBatches = 2
	maxNorm      = 0.5
	every        = 2
	learningRate = 0.1
)

func link(letter byte) optim.Transform {
	switch letter {
	case 'M':
		return optim.MicroBatches(microBatches)
	case 'L':
		return optim.LossScale(mixed.NewDynamicLossScale().Initial(1024))
	case 'C':
		return optim.ClipByGlobalNorm(maxNorm)
	case 'S':
		return optim.MultiSteps(every)
	case 'A':
		return optim.Apply(optimizers.StochasticGradientDescent().WithDecay(false).WithLearningRate(learningRate))
	}
	panic(fmt.Sprintf("no link %q", letter))
}

// orders returns every ordering of every non-empty subset of letters.
func orders(letters string) []string {
	var out []string
	var rec func(prefix, rest string)
	rec = func(prefix, rest string) {
		if prefix != "" {
			out = append(out, prefix)
		}
		for i := range rest {
			rec(prefix+rest[i:i+1], rest[:i]+rest[i+1:])
		}
	}
	rec("", letters)
	return out
}

// shouldWork is the rule a user reads in NewChain's doc, written independently: one optimizer,
// last; MicroBatches first; LossScale before any clip; LossScale, MicroBatches, MultiSteps at most
// once.
func shouldWork(order string) bool {
	for _, once := range "AMLS" {
		if strings.Count(order, string(once)) > 1 {
			return false
		}
	}
	if !strings.HasSuffix(order, "A") || strings.Contains(order[1:], "M") {
		return false
	}
	if l := strings.IndexByte(order, 'L'); l >= 0 {
		if c := strings.IndexByte(order, 'C'); c >= 0 && c < l {
			return false
		}
	}
	return true
}

// TestEveryOrder builds every ordering of the five links (325 chains) and some repeats: a chain
// the rules allow builds, and trains a linear model exactly like a float64 reference of the same
// order (including a NaN batch when it has a LossScale); any other is an error naming two of its
// links (or, without an optimizer, the missing optimizer).
func TestEveryOrder(t *testing.T) {
	all := append(orders("MLCSA"), "LLA", "MMA", "SSA", "AA", "LCCA", "MLSSA", "MAA")
	works := 0
	for _, order := range all {
		links := make([]optim.Transform, len(order))
		for i := range order {
			links[i] = link(order[i])
		}
		chain, err := optim.NewChain(links...)
		if shouldWork(order) != (err == nil) {
			t.Errorf("%s: NewChain error %v, want it to work: %v", order, err, shouldWork(order))
			continue
		}
		if err != nil {
			named := 0 // links the error names, a repeated one as often as it is repeated
			seen := map[string]bool{}
			for _, l := range links {
				if name := l.String(); !seen[name] {
					seen[name] = true
					in := 0
					for _, p := range links {
						if p.String() == name {
							in++
						}
					}
					named += min(in, strings.Count(err.Error(), name))
				}
			}
			if named < 2 && !(strings.Contains(err.Error(), "no optimizer") && !strings.Contains(order, "A")) {
				t.Errorf("%s: the error %q does not name both links", order, err)
			}
			continue
		}
		works++
		t.Run(order, func(t *testing.T) { checkAgainstReference(t, order, chain) })
	}
	if works != 25 {
		t.Errorf("%d orders work, want the 24 orders and LCCA", works)
	}
}

// batches are the calls' inputs: x [4, 3], y [4]; the third batch holds a NaN (used only by
// chains with a LossScale).
func batches(withNaN bool) (xs [][]float64, ys [][]float64) {
	for call := range 6 {
		x := make([]float64, 12)
		y := make([]float64, 4)
		for i := range x {
			x[i] = math.Sin(float64(call*12+i)) * 2
		}
		for i := range y {
			y[i] = math.Cos(float64(call*4 + i))
		}
		if withNaN && call == 2 {
			x[1] = math.NaN()
		}
		xs, ys = append(xs, x), append(ys, y)
	}
	return
}

var initialW = []float64{0.5, -0.25, 1}

// reference runs the chain's order in float64 on the host: it returns the final weights and the
// number of applied updates.
func reference(order string, xs, ys [][]float64) ([]float64, int) {
	w := slices.Clone(initialW)
	var acc []float64
	n, applied := 0, 0
	var at func(i int, g []float64)
	at = func(i int, g []float64) {
		switch order[i] {
		case 'M':
			at(i+1, g)
		case 'L':
			for _, v := range g {
				if math.IsNaN(v) || math.IsInf(v, 0) {
					return
				}
			}
			at(i+1, g)
		case 'C':
			norm := 0.0
			for _, v := range g {
				norm += v * v
			}
			f := min(1, maxNorm/math.Sqrt(norm))
			c := make([]float64, len(g))
			for j, v := range g {
				c[j] = v * f
			}
			at(i+1, c)
		case 'S':
			if acc == nil {
				acc = make([]float64, len(g))
			}
			for j, v := range g {
				acc[j] += v
			}
			n++
			if n == every {
				mean := make([]float64, len(g))
				for j := range acc {
					mean[j] = acc[j] / every
				}
				acc, n = nil, 0
				at(i+1, mean)
			}
		case 'A':
			for j := range w {
				w[j] -= learningRate * g[j]
			}
			applied++
		}
	}
	for call := range xs {
		at(0, gradient(xs[call], ys[call], w))
	}
	return w, applied
}

// gradient is d/dw mean_e (x_e·w - y_e)² in float64, for a batch x [4, 3], y [4].
func gradient(x, y, w []float64) []float64 {
	g := make([]float64, 3)
	for e := range 4 {
		r := -y[e]
		for j := range 3 {
			r += x[e*3+j] * w[j]
		}
		for j := range 3 {
			g[j] += 2 * r * x[e*3+j] / 4
		}
	}
	return g
}

var squaredError = accum.MaskedLoss(func(ctx *context.Context, b []*graph.Node) (*graph.Node, *graph.Node) {
	w := ctx.VariableWithValue("w", []float32{0.5, -0.25, 1}).ValueGraph(b[0].Graph())
	r := graph.Sub(graph.ReduceSum(graph.Mul(b[0], graph.InsertAxes(w, 0)), -1), b[1])
	return graph.Square(r), nil
})

func checkAgainstReference(t *testing.T, order string, chain *optim.Chain) {
	xs, ys := batches(strings.Contains(order, "L"))
	want, applied := reference(order, xs, ys)
	ctx := context.New()
	exec, err := context.NewExec(testkit.Embedded(), ctx, chain.StepFn(squaredError))
	if err != nil {
		t.Fatal(err)
	}
	defer exec.Finalize()
	for call := range xs {
		x := tensors.FromFlatDataAndDimensions(toFloat32(xs[call]), 4, 3)
		y := tensors.FromFlatDataAndDimensions(toFloat32(ys[call]), 4)
		if _, err := exec.Exec(x, y); err != nil {
			t.Fatal(err)
		}
	}
	got := testkit.Floats(ctx.GetVariableByScopeAndName("/", "w").MustValue())
	for j := range want {
		if !(math.Abs(got[j]-want[j]) <= 1e-5*max(1, math.Abs(want[j]))) { // NaN fails too
			t.Errorf("w = %.7f, float64 reference %.7f", got, want)
			break
		}
	}
	if step := optimizers.GetGlobalStep(ctx); int(step) != applied {
		t.Errorf("global step %d, want %d applied updates", step, applied)
	}
}

func toFloat32(x []float64) []float32 {
	out := make([]float32, len(x))
	for i, v := range x {
		out[i] = float32(v)
	}
	return out
}

// notWithGradients is an optimizer without UpdateGraphWithGradients.
type notWithGradients struct{}

func (notWithGradients) UpdateGraph(*context.Context, *graph.Graph, *graph.Node) {}
func (notWithGradients) Clear(*context.Context) error                            { return nil }

// TestBadLinks: links with values that cannot work are errors at NewChain naming the link.
func TestBadLinks(t *testing.T) {
	for _, tc := range []struct {
		link optim.Transform
		want string
	}{
		{optim.MicroBatches(0), "MicroBatches(0)"},
		{optim.MultiSteps(0), "MultiSteps(0)"},
		{optim.ClipByGlobalNorm(-1), "ClipByGlobalNorm(-1)"},
		{optim.ClipByGlobalNorm(math.Inf(1)), "ClipByGlobalNorm(+Inf)"},
		{optim.Apply(notWithGradients{}), "UpdateGraphWithGradients"},
		{optim.Apply(nil), "Apply(nil)"},
	} {
		links := []optim.Transform{tc.link}
		if !strings.HasPrefix(tc.want, "Apply") && tc.want != "UpdateGraphWithGradients" {
			links = append(links, link('A'))
		}
		_, err := optim.NewChain(links...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("NewChain(%s): error %v, want one naming %q", tc.link, err, tc.want)
		}
	}
	if _, err := optim.NewChain(); err == nil {
		t.Error("NewChain(): no error for an empty chain")
	}
}

// halve is a user's own link: it halves the gradients.
type halve struct{}

func (halve) Apply(u optim.Update, next func(optim.Update)) {
	for i, g := range u.Gradients {
		u.Gradients[i] = graph.MulScalar(g, 0.5)
	}
	next(u)
}

func (halve) String() string { return "halve" }

// TestOwnTransform: a Transform of the user's own takes part in a chain like onegpu's links (here
// after LossScale, whose skip also covers it), and must come before the optimizer.
func TestOwnTransform(t *testing.T) {
	if _, err := optim.NewChain(link('A'), halve{}); err == nil || !strings.Contains(err.Error(), "halve after Apply") {
		t.Errorf("a link after the optimizer: %v", err)
	}
	chain, err := optim.NewChain(link('L'), halve{}, link('A'))
	if err != nil {
		t.Fatal(err)
	}
	xs, ys := batches(true)
	plain, _ := reference("LA", xs, ys) // one step per finite call, at half the gradient = half the learning rate
	ctx := context.New()
	exec, err := context.NewExec(testkit.Embedded(), ctx, chain.StepFn(squaredError))
	if err != nil {
		t.Fatal(err)
	}
	defer exec.Finalize()
	w := slices.Clone(initialW)
	for call := range xs {
		if _, err := exec.Exec(tensors.FromFlatDataAndDimensions(toFloat32(xs[call]), 4, 3), tensors.FromFlatDataAndDimensions(toFloat32(ys[call]), 4)); err != nil {
			t.Fatal(err)
		}
		if call != 2 { // the NaN call is skipped
			g := gradient(xs[call], ys[call], w)
			for j := range w {
				w[j] -= learningRate * 0.5 * g[j]
			}
		}
	}
	got := testkit.Floats(ctx.GetVariableByScopeAndName("/", "w").MustValue())
	for j := range w {
		if !(math.Abs(got[j]-w[j]) <= 1e-5) || got[j] == plain[j] {
			t.Errorf("w = %.7f, want %.7f (and not the unhalved %.7f)", got, w, plain)
			break
		}
	}
}
