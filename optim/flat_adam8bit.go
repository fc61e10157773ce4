package optim

import (
	"fmt"
	"math"

	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/gomlx/gomlx/pkg/ml/context"
)

// Flat returns 8-bit Adam's update as a flat loop: the same moments, codes and parameters as
// UpdateGraphWithGradients on every backend (its formulation rounds the same everywhere).
func (o *Adam8bitOptimizer) Flat(ctx *context.Context) FlatUpdate {
	return adam8bitFlat{o: o, ctx: ctx}
}

// adam8bitFlat is 8-bit Adam's flat update of the variables of ctx.
type adam8bitFlat struct {
	o   *Adam8bitOptimizer
	ctx *context.Context
}

// Scalars are the learning rate (float32) and the update count (int64).
func (a adam8bitFlat) Scalars(ctx *context.Context, g *graph.Graph) []*graph.Node {
	learningRate, count := countUpdate(ctx, g, Adam8bitScope, a.o.config.learningRate)
	return []*graph.Node{learningRate, count}
}

// Update runs UpdateGraphWithGradients element by element: the moments decoded from their codes,
// their moving averages and the step in float64 (adamStep.apply), the moments coded again block
// by block (quantize.go's nearest codes, thresholds and all).
func (a adam8bitFlat) Update(step FlatStep, vars []*context.Variable, grads, out []*tensors.Tensor) error {
	if err := checkFlat("adam8bit", vars, grads, out); err != nil {
		return err
	}
	if len(step.Scalars) != 2 {
		return fmt.Errorf("adam8bit: %d scalars, want the learning rate and the count", len(step.Scalars))
	}
	c := a.o.config
	count := int64(step.Scalars[1])
	b1, b2 := float32(c.beta1), float32(c.beta2)
	k := adam8bitScalars{
		lr: step.Scalars[0], b1: float64(b1), b2: float64(b2), omb1: float64(1 - b1), omb2: float64(1 - b2),
		debias1: 1 / (1 - powInt(float64(b1), count)),
		debias2: 1 / (1 - powInt(float64(b2), count)),
		eps:     float64(float32(c.epsilon)),
	}
	// Per variable: value, gradient, out, then the first and second moments: float32 (and nil),
	// or codes and scales.
	const per = 7
	all := make([]*tensors.Tensor, 0, per*len(vars))
	mutable := make([]bool, 0, per*len(vars))
	sizes := make([]int, len(vars))
	for i, v := range vars {
		value, err := v.Value()
		if err != nil {
			return err
		}
		all = append(all, value, grads[i], out[i])
		mutable = append(mutable, true, false, true)
		for _, which := range []struct {
			name     string
			unsigned bool
		}{{"1st", false}, {"2nd", true}} {
			m := a.o.moment(a.ctx, v, which.name, which.unsigned)
			first, second := m.full, (*context.Variable)(nil)
			if m.full == nil {
				first, second = m.codes, m.scales
			}
			t, err := stateValue(first, v)
			if err != nil {
				return err
			}
			all, mutable = append(all, t), append(mutable, true)
			if second == nil {
				all, mutable = append(all, nil), append(mutable, false)
				continue
			}
			if t, err = stateValue(second, v); err != nil {
				return err
			}
			all, mutable = append(all, t), append(mutable, true)
		}
		sizes[i] = v.Shape().Size()
	}
	bs := c.blockSize
	tasks := splitTasks(sizes, flatChunk, bs)
	return withFlat(all, mutable, func(flats []any) {
		runTasks(tasks, func(_ int, t flatTask) {
			f := flats[per*t.v : per*t.v+per]
			p, g := f[0].([]float32), f[1].([]float32)
			if f[4] == nil { // float32 moments
				k.apply(step, p[t.lo:t.hi], g[t.lo:t.hi], f[3].([]float32)[t.lo:t.hi], f[5].([]float32)[t.lo:t.hi])
			} else {
				q := quantizedMoments{mCodes: f[3].([]int8), mScales: f[4].([]float32), sCodes: f[5].([]uint8), sScales: f[6].([]float32)}
				scratch, scaling := make([]float32, 2*bs), step.loop()
				for lo := t.lo; lo < t.hi; lo += bs {
					k.applyBlock(scaling, q, lo/bs, bs, p, g, scratch)
				}
			}
			if f[2] != nil {
				convertOut(f[2], t.lo, p[t.lo:t.hi])
			}
		})
	})
}

// adam8bitScalars are one step's constants: the learning rate, debiasing factors and ε in
// float64, the betas and one minus them as float32 values (held in float64), as adamStep has them.
type adam8bitScalars struct {
	lr, b1, b2, omb1, omb2, debias1, debias2, eps float64
}

// step is adamStep.apply for one element: the new moments (float64) and the new value.
func (k adam8bitScalars) step(m, s, g, value float32) (mNew, sNew float64, updated float32) {
	// Products of float32 values are exact in float64: a fused multiply-add rounds the same.
	mNew = k.b1*float64(m) + k.omb1*float64(g)
	sNew = k.b2*float64(s) + k.omb2*float64(float32(g*g))
	denominator := math.Sqrt(sNew*k.debias2) + k.eps
	update := (k.lr * (mNew * k.debias1)) / denominator
	return mNew, sNew, float32(float64(value) - update)
}

// apply updates p and the float32 moments m and s in place with gradient g (all of one length).
func (k adam8bitScalars) apply(step FlatStep, p, g, m, s []float32) {
	g, m, s = g[:len(p)], m[:len(p)], s[:len(p)]
	scaling := step.loop()
	for j := range p {
		mNew, sNew, updated := k.step(m[j], s[j], scaling.of(g[j]), p[j])
		m[j], s[j], p[j] = float32(mNew), float32(sNew), updated
	}
}

// quantizedMoments are a variable's 8-bit moments: codes [numBlocks·blockSize], scales [numBlocks].
type quantizedMoments struct {
	mCodes  []int8
	mScales []float32
	sCodes  []uint8
	sScales []float32
}

// applyBlock updates block b of p (the elements past p's end are the graph's zero padding) and its
// codes and scales; scratch holds 2·bs float32 values. Whole vectors of a block run the vector
// kernels where there are some.
func (k adam8bitScalars) applyBlock(scaling loopScaling, q quantizedMoments, b, bs int, p, g, scratch []float32) {
	lo := b * bs
	ms, ss := scratch[:bs], scratch[bs:2*bs]
	mCodes, sCodes := q.mCodes[lo:lo+bs], q.sCodes[lo:lo+bs]
	vector := hasAVX2 && bs%8 == 0
	var v adam8bitVector
	if vector {
		v = k.vector(scaling, q.mScales[b], q.sScales[b])
	}
	var mMax, sMax float32
	if vector && lo+bs <= len(p) {
		adam8bitMomentsAVX2(&p[lo], &g[lo], &mCodes[0], &sCodes[0], &ms[0], &ss[0], bs, &v)
		mMax, sMax = v.mMax, v.sMax
	} else {
		mMax, sMax = k.moments(scaling, q.mScales[b], q.sScales[b], mCodes, sCodes, p[lo:min(lo+bs, len(p))], g[lo:min(lo+bs, len(p))], ms, ss)
	}
	q.mScales[b], q.sScales[b] = mMax, sMax
	if vector {
		v.scales(mMax, sMax)
		adam8bitCodesAVX2(&ms[0], &ss[0], &mCodes[0], &sCodes[0], bs, &v)
		return
	}
	codes(mMax, sMax, ms, ss, mCodes, sCodes)
}

// moments is the first half of a block's update: the moments decoded from the codes with the
// block's old scales, the step on p's elements (the rest of the block, the padding, has gradient
// and value 0), the new moments rounded to float32 into ms and ss; it returns their largest
// magnitudes.
func (k adam8bitScalars) moments(scaling loopScaling, mScale, sScale float32, mCodes []int8, sCodes []uint8, p, g, ms, ss []float32) (mMax, sMax float32) {
	for j := range ms {
		var gj, value float32
		if j < len(p) {
			gj, value = scaling.of(g[j]), p[j]
		}
		m := signedLevel[int(mCodes[j])+signedLevels] * mScale
		s := unsignedLevel[sCodes[j]] * sScale
		mNew, sNew, updated := k.step(m, s, gj, value)
		if j < len(p) {
			p[j] = updated
		}
		ms[j], ss[j] = float32(mNew), float32(sNew)
		mMax, sMax = max(mMax, abs32(ms[j])), max(sMax, ss[j])
	}
	return mMax, sMax
}

// codes is the second half: the nearest codes of the new moments ms and ss on the block's new
// scales mMax and sMax.
func codes(mMax, sMax float32, ms, ss []float32, mCodes []int8, sCodes []uint8) {
	var mThresholds [signedLevels + 2]float32
	var sThresholds [unsignedLevels + 2]float32
	for i := range mThresholds {
		mThresholds[i] = signedThreshold[i] * mMax
	}
	for i := range sThresholds {
		sThresholds[i] = unsignedThreshold[i] * sMax
	}
	mInverse, sInverse := reciprocal(mMax), reciprocal(sMax)
	for j := range ms {
		code := nearestCode(abs32(ms[j]), mInverse, signedLevels, false, mThresholds[:])
		if ms[j] < 0 {
			code = -code
		}
		mCodes[j] = int8(code)
		code = nearestCode(ss[j], sInverse, unsignedLevels, true, sThresholds[:])
		if ss[j] > 0 {
			code = max(code, 1)
		}
		sCodes[j] = uint8(code)
	}
}

// adam8bitVector is what the vector kernels (adam8bitMomentsAVX2, adam8bitCodesAVX2) read, at
// the fixed offsets flat_amd64.s uses (TestAdam8bitVectorLayout checks them): the step's float64
// constants, the block's scales and their reciprocals, the gradient's scaling, the codes'
// constants, each broadcast to a vector; the kernels write the new moments' largest magnitudes.
type adam8bitVector struct {
	lr, b1, b2, omb1, omb2, debias1, debias2, eps [4]float64
	mScale, sScale, divisor1, divisor2, clip      [8]float32
	mInverse, sInverse                            [8]float32
	inv127, inv255, half, one, levels127          [8]float32
	levels255, absMask                            [8]float32
	kinds                                         [2]int32
	clips                                         int32
	mMax, sMax                                    float32
}

// vector is k with scaling and a block's old scales for the vector kernels.
func (k adam8bitScalars) vector(scaling loopScaling, mScale, sScale float32) adam8bitVector {
	var v adam8bitVector
	for i := range 4 {
		v.lr[i], v.b1[i], v.b2[i], v.omb1[i], v.omb2[i] = k.lr, k.b1, k.b2, k.omb1, k.omb2
		v.debias1[i], v.debias2[i], v.eps[i] = k.debias1, k.debias2, k.eps
	}
	absMask := math.Float32frombits(1<<31 - 1)
	for i := range 8 {
		v.mScale[i], v.sScale[i], v.clip[i] = mScale, sScale, scaling.clip
		v.inv127[i], v.inv255[i] = float32(1/float64(signedLevels)), float32(1/float64(unsignedLevels))
		v.half[i], v.one[i], v.levels127[i], v.levels255[i], v.absMask[i] = 0.5, 1, signedLevels, unsignedLevels, absMask
	}
	for i, d := range scaling.divide {
		value := d.d
		if d.kind == 1 {
			value = d.inverse
		}
		v.kinds[i] = int32(d.kind)
		for j := range 8 {
			[]*[8]float32{&v.divisor1, &v.divisor2}[i][j] = value
		}
	}
	if scaling.clip != 1 {
		v.clips = 1
	}
	return v
}

// scales sets the block's new scales and their reciprocals, for the codes.
func (v *adam8bitVector) scales(mMax, sMax float32) {
	mInverse, sInverse := reciprocal(mMax), reciprocal(sMax)
	for i := range 8 {
		v.mScale[i], v.sScale[i], v.mInverse[i], v.sInverse[i] = mMax, sMax, mInverse, sInverse
	}
}

// nearestCode is quantize.go's nearestCodes for one magnitude of a block, given the reciprocal of
// the block's largest magnitude (0 for a zero block), with levels levels and power 2 (fourthRoot
// false) or 4, and the block's thresholds scale·((k-½)/levels)^power for k = 0..levels+1: the
// estimate from the root, checked against the two thresholds around it. Non-finite magnitudes are
// not coded as the graph codes them.
func nearestCode(magnitude, inverse float32, levels int, fourthRoot bool, thresholds []float32) int {
	root := sqrt32(magnitude * inverse)
	if fourthRoot {
		root = sqrt32(root)
	}
	x := root * float32(levels)
	if !(x >= 0) {
		return 0
	}
	estimate := levels // RoundHalfUp(x), at most levels
	if x < float32(levels) {
		if estimate = int(x); x >= float32(estimate)+0.5 {
			estimate++
		}
	}
	code := estimate
	if estimate > 0 && magnitude < thresholds[estimate] {
		code = estimate - 1
	}
	if estimate < levels && magnitude > 0 && magnitude >= thresholds[estimate+1] {
		code = estimate + 1
	}
	return code
}

// The codes' levels and thresholds, computed as quantize.go's graph computes them in float32:
// signedLevel[q+127] = t·|t| for t = q·(1/127); unsignedLevel[q] = (t²)² for t = q·(1/255);
// signedThreshold[k] = ((k-½)/127)², unsignedThreshold[k] = (((k-½)/255)²)², before the scale.
var (
	signedLevel       [2*signedLevels + 1]float32
	unsignedLevel     [unsignedLevels + 1]float32
	signedThreshold   [signedLevels + 2]float32
	unsignedThreshold [unsignedLevels + 2]float32
)

func init() {
	for q := -signedLevels; q <= signedLevels; q++ {
		t := float32(q) * float32(1/float64(signedLevels)) // graph.DivScalar multiplies by the reciprocal
		signedLevel[q+signedLevels] = t * abs32(t)
	}
	for q := range unsignedLevels + 1 {
		t := float32(q) * float32(1/float64(unsignedLevels))
		t = t * t
		unsignedLevel[q] = t * t
	}
	for k := range signedThreshold {
		u := float32(float32(k)-0.5) * float32(1/float64(signedLevels))
		signedThreshold[k] = u * u
	}
	for k := range unsignedThreshold {
		u := float32(float32(k)-0.5) * float32(1/float64(unsignedLevels))
		u = u * u
		unsignedThreshold[k] = u * u
	}
}

// powInt is exact.PowInt's value: base^n by the same multiplications.
func powInt(base float64, n int64) float64 {
	n = max(n, 0)
	result, power := 1.0, base
	for k := range 63 {
		if power == 0 {
			if n >= 1<<k {
				return 0
			}
			return result
		}
		if power != 1 && n&(1<<k) != 0 {
			result *= power
		}
		power *= power
	}
	return result
}

// reciprocal is 1/scale for a positive scale, else 0, as nearestCodes' inverse.
func reciprocal(scale float32) float32 {
	if scale > 0 {
		return 1 / scale
	}
	return 0
}

func abs32(x float32) float32 { return math.Float32frombits(math.Float32bits(x) &^ (1 << 31)) }

func sqrt32(x float32) float32 { return float32(math.Sqrt(float64(x))) }
