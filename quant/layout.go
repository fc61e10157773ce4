package quant

import (
	"fmt"
	"strings"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/shapes"
)

// Format names a block code.
type Format string

const (
	// NF4 is 4-bit NormalFloat (NF4Levels): two codes a byte, the first element of a pair in the
	// high nibble, as bitsandbytes packs them.
	NF4 Format = "nf4"
	// Int8 is the linear 8-bit absmax code: levels k/127 for k = -127..127, stored one byte an
	// element as the index k+127.
	Int8 Format = "int8"
)

// Formats lists the formats, in the order the CLI offers them.
var Formats = []Format{NF4, Int8}

// ParseFormat reads a format name (nf4 or int8, any case).
func ParseFormat(s string) (Format, error) {
	for _, f := range Formats {
		if strings.EqualFold(s, string(f)) {
			return f, nil
		}
	}
	return "", fmt.Errorf("quant: unknown format %q: want nf4 or int8", s)
}

const (
	// DefaultBlockSize is QLoRA's block: 64 elements share one scale.
	DefaultBlockSize = 64
	// DefaultScaleBlockSize is QLoRA's block of scales in double quantization: 256 scales share
	// one float32 scale of their own.
	DefaultScaleBlockSize = 256
)

// Config describes a block code. The zero value of a size means its default.
type Config struct {
	// Format is the code of the elements.
	Format Format
	// BlockSize is the number of elements that share one scale, their largest magnitude
	// (default DefaultBlockSize; even for NF4, so that a block is whole bytes).
	BlockSize int
	// DoubleQuant stores the block scales in 8 bits too, as QLoRA does (bitsandbytes'
	// compress_statistics): their mean is subtracted and the rest is coded with DynamicMap in
	// blocks of ScaleBlockSize, each with a float32 scale. Without it each block keeps a float32.
	DoubleQuant bool
	// ScaleBlockSize is the number of scales that share one float32 scale under DoubleQuant
	// (default DefaultScaleBlockSize).
	ScaleBlockSize int
}

// QLoRA is the configuration of the QLoRA paper and bitsandbytes' 4-bit default for it: NF4 in
// blocks of 64, double quantization of the scales in blocks of 256 (0.515869140625 bytes a
// parameter).
func QLoRA() Config {
	return Config{Format: NF4, BlockSize: DefaultBlockSize, DoubleQuant: true, ScaleBlockSize: DefaultScaleBlockSize}
}

// Default returns a format's default configuration: QLoRA's for NF4; for Int8 blocks of 64 with
// a float32 scale each (1.0625 bytes a parameter), the simpler code.
func Default(f Format) Config {
	if f == NF4 {
		return QLoRA()
	}
	return Config{Format: f, BlockSize: DefaultBlockSize}
}

// Resolved returns c with its defaults filled in.
func (c Config) Resolved() Config {
	if c.BlockSize == 0 {
		c.BlockSize = DefaultBlockSize
	}
	if c.ScaleBlockSize == 0 {
		c.ScaleBlockSize = DefaultScaleBlockSize
	}
	return c
}

// String describes c: "nf4 (blocks of 64, scales in 8 bits in blocks of 256)", "int8 (blocks of
// 64)".
func (c Config) String() string {
	c = c.Resolved()
	s := fmt.Sprintf("%s (blocks of %d", c.Format, c.BlockSize)
	if c.DoubleQuant {
		s += fmt.Sprintf(", scales in 8 bits in blocks of %d", c.ScaleBlockSize)
	}
	return s + ")"
}

// Validate reports a configuration that cannot be used, naming the field.
func (c Config) Validate() error {
	c = c.Resolved()
	switch {
	case c.Format != NF4 && c.Format != Int8:
		return fmt.Errorf("quant: Config.Format %q is not a format: want %q or %q", c.Format, NF4, Int8)
	case c.BlockSize < 1:
		return fmt.Errorf("quant: Config.BlockSize %d must be positive", c.BlockSize)
	case c.Format == NF4 && c.BlockSize%2 != 0:
		return fmt.Errorf("quant: Config.BlockSize %d must be even for nf4 (two 4-bit codes a byte; QLoRA uses 64)", c.BlockSize)
	case c.DoubleQuant && c.ScaleBlockSize < 1:
		return fmt.Errorf("quant: Config.ScaleBlockSize %d must be positive", c.ScaleBlockSize)
	}
	return nil
}

// code returns the elements' code.
func (c Config) code() code {
	if c.Format == NF4 {
		return nf4Code
	}
	return int8Code
}

// bitsPerCode is 4 for NF4, 8 for Int8.
func (c Config) bitsPerCode() int {
	if c.Format == NF4 {
		return 4
	}
	return 8
}

// BytesPerParameter is the storage of one element in the limit of a large tensor: its code plus
// its share of the scales (padding and the double quantization's one offset a tensor left out;
// Layout.Bytes counts them). NF4 with double quantization: 1/2 + 1/64 + 4/(64·256) =
// 0.515869140625 bytes (4.127 bits); without: 1/2 + 4/64 = 0.5625; Int8: 1.0625.
func (c Config) BytesPerParameter() float64 {
	c = c.Resolved()
	b := float64(c.bitsPerCode()) / 8
	if c.DoubleQuant {
		return b + 1/float64(c.BlockSize) + 4/float64(c.BlockSize*c.ScaleBlockSize)
	}
	return b + 4/float64(c.BlockSize)
}

// Layout is the shape of a quantized tensor: its configuration (resolved) and its dimensions.
// A tensor whose size is not a multiple of the block is padded with zeros to whole blocks: the
// last block's scale is still the largest magnitude of its real elements (zeros do not change a
// maximum), so codes and scales equal bitsandbytes', which quantizes a partial last block on its
// own; the padding costs less than a block and is dropped when dequantizing.
type Layout struct {
	Config
	Dims []int
}

// NewLayout checks c and dims and returns their layout.
func NewLayout(c Config, dims ...int) (Layout, error) {
	c = c.Resolved()
	if err := c.Validate(); err != nil {
		return Layout{}, err
	}
	n := 1
	for _, d := range dims {
		if d < 1 {
			return Layout{}, fmt.Errorf("quant: cannot quantize a tensor of dimensions %v: every dimension must be positive", dims)
		}
		n *= d
	}
	return Layout{Config: c, Dims: append([]int(nil), dims...)}, nil
}

// Size is the number of elements.
func (l Layout) Size() int {
	n := 1
	for _, d := range l.Dims {
		n *= d
	}
	return n
}

// NumBlocks is the number of blocks (the last one padded when Size is not a multiple of BlockSize).
func (l Layout) NumBlocks() int { return ceilDiv(l.Size(), l.BlockSize) }

// NumScaleBlocks is the number of blocks of scales under DoubleQuant (0 without).
func (l Layout) NumScaleBlocks() int {
	if !l.DoubleQuant {
		return 0
	}
	return ceilDiv(l.NumBlocks(), l.ScaleBlockSize)
}

// Part is one stored tensor of a quantized tensor.
type Part struct {
	Name  string
	Shape shapes.Shape
}

// The names of the parts.
const (
	CodesName       = "codes"        // uint8 [NumBlocks, BlockSize/2] (NF4) or [NumBlocks, BlockSize] (Int8)
	ScalesName      = "scales"       // float32 [NumBlocks], without DoubleQuant
	ScaleCodesName  = "scale_codes"  // uint8 [NumBlocks]: DynamicMap indices of scale - offset
	ScaleScalesName = "scale_scales" // float32 [NumScaleBlocks]
	ScaleOffsetName = "scale_offset" // float32 scalar: the mean of the scales
)

// Parts lists the tensors that store a quantized tensor, in the order Tensor.Tensors returns
// them and Nodes reads them: the codes, then the float32 scales or, under DoubleQuant, the scale
// codes, the scales' scales and the offset.
func (l Layout) Parts() []Part {
	perBlock := l.BlockSize
	if l.Format == NF4 {
		perBlock /= 2
	}
	parts := []Part{{CodesName, shapes.Make(dtypes.Uint8, l.NumBlocks(), perBlock)}}
	if !l.DoubleQuant {
		return append(parts, Part{ScalesName, shapes.Make(dtypes.Float32, l.NumBlocks())})
	}
	return append(parts,
		Part{ScaleCodesName, shapes.Make(dtypes.Uint8, l.NumBlocks())},
		Part{ScaleScalesName, shapes.Make(dtypes.Float32, l.NumScaleBlocks())},
		Part{ScaleOffsetName, shapes.Make(dtypes.Float32)})
}

// Bytes is the storage of the quantized tensor, padding and offset included.
func (l Layout) Bytes() int64 {
	var b int64
	for _, p := range l.Parts() {
		b += int64(p.Shape.Memory())
	}
	return b
}

func ceilDiv(a, b int) int { return (a + b - 1) / b }
