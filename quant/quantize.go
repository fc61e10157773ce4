package quant

import (
	"fmt"
	"math"
	"runtime"
	"sync"

	"github.com/gomlx/gomlx/pkg/core/dtypes/bfloat16"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/x448/float16"
)

// Tensor is a quantized tensor on the host: the parts Layout.Parts describes, as Go slices.
type Tensor struct {
	Layout
	// Codes holds the elements' codes block by block, padded to whole blocks: NF4 two a byte
	// (the first of a pair in the high nibble), Int8 one a byte.
	Codes []uint8
	// Scales are the blocks' largest magnitudes (without DoubleQuant).
	Scales []float32
	// ScaleCodes, ScaleScales and ScaleOffset store the block scales under DoubleQuant: scale b
	// is DynamicMap()[ScaleCodes[b]]·ScaleScales[b/ScaleBlockSize] + ScaleOffset.
	ScaleCodes  []uint8
	ScaleScales []float32
	ScaleOffset float32
}

// smallestScale is bitsandbytes' floor on a scale it divides by (absmax.clamp(min=1e-38)): a
// block of zeros codes as zeros.
const smallestScale = float32(1e-38)

// Quantize codes values (row-major, of the given dimensions) with c, the way bitsandbytes'
// quantize_4bit and quantize_blockwise do (see code): each block's scale is its largest
// magnitude, each element the index of the level nearest value/scale, and under DoubleQuant the
// scales minus their mean (float32, rounded once from a float64 sum) are coded the same way
// with DynamicMap in blocks of ScaleBlockSize. Blocks are coded in parallel. A NaN or infinite
// value is an error: it would poison its block's scale.
func Quantize(c Config, values []float32, dims ...int) (*Tensor, error) {
	l, err := NewLayout(c, dims...)
	if err != nil {
		return nil, err
	}
	if len(values) != l.Size() {
		return nil, fmt.Errorf("quant: %d values for dimensions %v (%d elements)", len(values), dims, l.Size())
	}
	return quantize(l, func(first, end int, _ []float32) []float32 { return values[first:end] })
}

// chunkBlocks is how many blocks a worker reads at a time from a source that is not float32: its
// buffer (chunkBlocks·BlockSize float32s) is all the float32 copy a quantization makes.
const chunkBlocks = 1024

// quantize codes the values read returns with l. read(first, end, buf) returns the values of flat
// indices [first, end): a view of the source, or buf (room for chunkBlocks blocks) filled with them.
func quantize(l Layout, read func(first, end int, buf []float32) []float32) (*Tensor, error) {
	t := &Tensor{Layout: l, Codes: make([]uint8, l.Parts()[0].Shape.Size())}
	scales := make([]float32, l.NumBlocks())
	type bad struct {
		index int
		value float32
	}
	bads := make(chan bad, 1)
	parallelRange(l.NumBlocks(), func(firstBlock, endBlock int) {
		buf := make([]float32, min(chunkBlocks, endBlock-firstBlock)*l.BlockSize)
		for b0 := firstBlock; b0 < endBlock; b0 += chunkBlocks {
			b1 := min(b0+chunkBlocks, endBlock)
			values := read(b0*l.BlockSize, min(b1*l.BlockSize, l.Size()), buf)
			for b := b0; b < b1; b++ {
				block := values[(b-b0)*l.BlockSize : min((b-b0+1)*l.BlockSize, len(values))]
				if i, ok := t.codeBlock(block, scales, b); !ok {
					select {
					case bads <- bad{b*l.BlockSize + i, block[i]}:
					default:
					}
					return
				}
			}
		}
	})
	select {
	case e := <-bads:
		return nil, fmt.Errorf("quant: cannot quantize a tensor with a non-finite value (%g at flat index %d)", e.value, e.index)
	default:
	}
	if !l.DoubleQuant {
		t.Scales = scales
		return t, nil
	}
	t.ScaleCodes, t.ScaleScales, t.ScaleOffset = doubleQuantize(scales, l.ScaleBlockSize)
	return t, nil
}

// codeBlock codes block b, whose values are block (the last one may be short), into t.Codes and
// its scale into scales[b]; it returns the index in block of a non-finite value and false if
// there is one.
func (t *Tensor) codeBlock(block, scales []float32, b int) (int, bool) {
	bs := t.BlockSize
	first := b * bs
	var scale float32
	for i, v := range block {
		if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
			return i, false
		}
		scale = max(scale, float32(math.Abs(float64(v))))
	}
	scales[b] = scale
	inverse := 1 / max(scale, smallestScale)
	c := t.code()
	codes := t.Codes[first/2 : (first+bs)/2]
	if t.Format != NF4 {
		codes = t.Codes[first : first+bs]
	}
	zero := c.index(0) // the padding's code
	for j := range bs {
		q := zero
		if j < len(block) {
			q = c.index(min(max(block[j]*inverse, -1), 1))
		}
		if t.Format != NF4 {
			codes[j] = q
		} else if j%2 == 0 {
			codes[j/2] = q << 4
		} else {
			codes[j/2] |= q
		}
	}
	return 0, true
}

// doubleQuantize codes the block scales as bitsandbytes' quantize_4bit does under
// compress_statistics: offset = mean(scales), then quantize_blockwise(scales - offset, blocksize)
// with the dynamic map.
func doubleQuantize(scales []float32, blockSize int) (codes []uint8, scaleScales []float32, offset float32) {
	var sum float64
	for _, s := range scales {
		sum += float64(s)
	}
	offset = float32(sum / float64(len(scales)))
	codes = make([]uint8, len(scales))
	scaleScales = make([]float32, ceilDiv(len(scales), blockSize))
	for b := range scaleScales {
		block := scales[b*blockSize : min((b+1)*blockSize, len(scales))]
		var m float32
		for _, s := range block {
			m = max(m, float32(math.Abs(float64(s-offset))))
		}
		scaleScales[b] = m
		inverse := 1 / max(m, smallestScale)
		for j, s := range block {
			codes[b*blockSize+j] = dynamicCode.index(min(max((s-offset)*inverse, -1), 1))
		}
	}
	return codes, scaleScales, offset
}

// BlockScales returns the blocks' scales, decoded under DoubleQuant as bitsandbytes'
// dequantize_blockwise does: level·scale rounded to float32, then the offset added.
func (t *Tensor) BlockScales() []float32 {
	if !t.DoubleQuant {
		return t.Scales
	}
	s := make([]float32, len(t.ScaleCodes))
	for b, q := range t.ScaleCodes {
		// The conversion rounds the product, so that no fused multiply-add skips it.
		s[b] = float32(dynamicMap[q]*t.ScaleScales[b/t.ScaleBlockSize]) + t.ScaleOffset
	}
	return s
}

// Dequantize returns the values t codes, row-major, in float32: level·scale per element, as
// bitsandbytes' dequantize_4bit computes it (and Nodes.Dequantize in a graph).
func (t *Tensor) Dequantize() []float32 {
	scales := t.BlockScales()
	c := t.code()
	out := make([]float32, t.Size())
	for i := range out {
		var q uint8
		switch {
		case t.Format != NF4:
			q = t.Codes[i]
		case i%2 == 0:
			q = t.Codes[i/2] >> 4
		default:
			q = t.Codes[i/2] & 15
		}
		out[i] = c.levels[q] * scales[i/t.BlockSize]
	}
	return out
}

// Tensors returns the parts as GoMLX tensors, in Layout.Parts' order: values for a graph's
// inputs or a context's variables.
func (t *Tensor) Tensors() []*tensors.Tensor {
	parts := t.Parts()
	out := []*tensors.Tensor{tensors.FromFlatDataAndDimensions(t.Codes, parts[0].Shape.Dimensions...)}
	if !t.DoubleQuant {
		return append(out, tensors.FromFlatDataAndDimensions(t.Scales, len(t.Scales)))
	}
	return append(out,
		tensors.FromFlatDataAndDimensions(t.ScaleCodes, len(t.ScaleCodes)),
		tensors.FromFlatDataAndDimensions(t.ScaleScales, len(t.ScaleScales)),
		tensors.FromScalar(t.ScaleOffset))
}

// QuantizeTensor quantizes a float tensor (float32, bfloat16 or float16 exactly; float64 rounded
// to float32 first, as bitsandbytes computes in float32) with c, keeping its dimensions. It reads
// the tensor in place: beyond the codes it holds a float32 copy of a few blocks a worker, not of
// the tensor.
func QuantizeTensor(c Config, x *tensors.Tensor) (q *Tensor, err error) {
	l, err := NewLayout(c, x.Shape().Dimensions...)
	if err != nil {
		return nil, err
	}
	x.MustConstFlatData(func(flat any) {
		var read func(first, end int, buf []float32) []float32
		switch f := flat.(type) {
		case []float32:
			read = func(first, end int, _ []float32) []float32 { return f[first:end] }
		case []float64:
			read = func(first, end int, buf []float32) []float32 {
				for i, v := range f[first:end] {
					buf[i] = float32(v)
				}
				return buf[:end-first]
			}
		case []bfloat16.BFloat16:
			read = func(first, end int, buf []float32) []float32 {
				for i, v := range f[first:end] {
					buf[i] = v.Float32()
				}
				return buf[:end-first]
			}
		case []float16.Float16:
			read = func(first, end int, buf []float32) []float32 {
				for i, v := range f[first:end] {
					buf[i] = v.Float32()
				}
				return buf[:end-first]
			}
		default:
			err = fmt.Errorf("quant: cannot quantize: a %s tensor is not float32, bfloat16, float16 or float64", x.DType())
			return
		}
		q, err = quantize(l, read)
	})
	return q, err
}

// Float32Values returns a float tensor's values as float32, row-major (float64 rounded, 16-bit
// formats exactly); another dtype is an error.
func Float32Values(x *tensors.Tensor) ([]float32, error) {
	out := make([]float32, x.Shape().Size())
	var err error
	x.MustConstFlatData(func(flat any) {
		switch f := flat.(type) {
		case []float32:
			copy(out, f)
		case []float64:
			for i, v := range f {
				out[i] = float32(v)
			}
		case []bfloat16.BFloat16:
			for i, v := range f {
				out[i] = v.Float32()
			}
		case []float16.Float16:
			for i, v := range f {
				out[i] = v.Float32()
			}
		default:
			err = fmt.Errorf("a %s tensor is not float32, bfloat16, float16 or float64", x.DType())
		}
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// parallelRange calls fn on consecutive ranges covering [0, n), one goroutine per CPU.
func parallelRange(n int, fn func(first, end int)) {
	workers := min(runtime.GOMAXPROCS(0), max(n/256, 1))
	var wg sync.WaitGroup
	for w := range workers {
		first, end := n*w/workers, n*(w+1)/workers
		wg.Add(1)
		go func() {
			defer wg.Done()
			fn(first, end)
		}()
	}
	wg.Wait()
}
