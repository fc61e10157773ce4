package checkpoint

import (
	"fmt"
	"math"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/ml/context"
)

// NonFiniteError reports a NaN or infinite value in a variable, at a save or in a checkpoint.
type NonFiniteError struct {
	Step     int
	Variable string
	Index    int // flat index of the first non-finite element
}

func (e *NonFiniteError) Error() string {
	return fmt.Sprintf("step %d: %s holds a non-finite value (element %d)", e.Step, e.Variable, e.Index)
}

// checkFinite returns a *NonFiniteError for the first float variable of ctx that saved selects
// with a NaN or Inf.
func checkFinite(ctx *context.Context, step int, saved func(*context.Context, *context.Variable) bool) error {
	var found error
	ctx.EnumerateVariables(func(v *context.Variable) {
		if found != nil || !v.HasValue() || !v.Shape().DType.IsFloat() || !saved(ctx, v) {
			return
		}
		err := v.MustValue().ConstBytes(func(data []byte) {
			if i := firstNonFinite(v.Shape().DType, data); i >= 0 {
				found = &NonFiniteError{Step: step, Variable: v.ParameterName(), Index: i}
			}
		})
		if err != nil && found == nil {
			found = err
		}
	})
	return found
}

// firstNonFinite returns the index of the first NaN or Inf in raw little-endian data of dtype, or
// -1. Types other than floats are always finite.
func firstNonFinite(dtype dtypes.DType, data []byte) int {
	le16 := func(i int) uint16 { return uint16(data[2*i]) | uint16(data[2*i+1])<<8 }
	switch dtype {
	case dtypes.Float32:
		for i := range len(data) / 4 {
			b := data[4*i:]
			f := math.Float32frombits(uint32(b[0]) | uint32(b[1])<<8 | uint32(b[2])<<16 | uint32(b[3])<<24)
			if math.IsNaN(float64(f)) || math.IsInf(float64(f), 0) {
				return i
			}
		}
	case dtypes.Float64:
		for i := range len(data) / 8 {
			var u uint64
			for k := 7; k >= 0; k-- {
				u = u<<8 | uint64(data[8*i+k])
			}
			if f := math.Float64frombits(u); math.IsNaN(f) || math.IsInf(f, 0) {
				return i
			}
		}
	case dtypes.BFloat16:
		for i := range len(data) / 2 {
			if le16(i)&0x7f80 == 0x7f80 { // exponent all ones: Inf or NaN
				return i
			}
		}
	case dtypes.Float16:
		for i := range len(data) / 2 {
			if le16(i)&0x7c00 == 0x7c00 {
				return i
			}
		}
	}
	return -1
}
