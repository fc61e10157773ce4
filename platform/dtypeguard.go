package platform

import (
	"fmt"
	"reflect"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/shapes"
)

// guardedBackend refuses, while a graph is being built, the dtypes its backend cannot compute,
// and rounds float32 to bfloat16 to nearest even (bf16round.go).
//
// GoMLX does not consult Capabilities().DTypes. On the embedded backend in v0.26.0 a float16 value
// is only rejected when the op runs, and in parallel mode that failure panics in a worker goroutine
// and kills the process. Every float16 value enters a graph through a parameter, a constant, a
// conversion, a bitcast or an iota, so guarding those five builder calls is enough.
type guardedBackend struct {
	backends.Backend
}

func guardDTypes(b backends.Backend) backends.Backend { return guardedBackend{b} }

// Unwrap returns the backend behind the guard.
func (b guardedBackend) Unwrap() backends.Backend { return b.Backend }

func (b guardedBackend) Builder(name string) backends.Builder {
	return guardedBuilder{Builder: b.Backend.Builder(name), backend: b.Backend}
}

type guardedBuilder struct {
	backends.Builder
	backend backends.Backend
}

// checkDType returns an error when dtype is not computable by the backend.
func (b guardedBuilder) checkDType(dtype dtypes.DType, what string) error {
	if b.backend.Capabilities().DTypes[dtype] {
		return nil
	}
	fix := "use another dtype"
	if dtype == dtypes.Float16 {
		fix = "use bfloat16 (the same memory saving; e.g. policy \"params=float32,compute=bfloat16\") " +
			"or run on XLA with a PJRT plugin (--backend xla:/abs/path/plugin.so), which computes float16"
	}
	return fmt.Errorf("%s: the %s backend cannot compute %s: %s", what, b.backend.Name(), dtype, fix)
}

func (b guardedBuilder) Parameter(name string, shape shapes.Shape, sharding *backends.ShardingSpec) (backends.Op, error) {
	if err := b.checkDType(shape.DType, fmt.Sprintf("parameter %q", name)); err != nil {
		return nil, err
	}
	return b.Builder.Parameter(name, shape, sharding)
}

func (b guardedBuilder) Constant(flat any, dims ...int) (backends.Op, error) {
	if t := reflect.TypeOf(flat); t != nil && t.Kind() == reflect.Slice {
		dtype := dtypes.FromGoType(t.Elem())
		if err := b.checkDType(dtype, "constant"); err != nil {
			return nil, err
		}
	}
	return b.Builder.Constant(flat, dims...)
}

func (b guardedBuilder) ConvertDType(x backends.Op, dtype dtypes.DType) (backends.Op, error) {
	if err := b.checkDType(dtype, "ConvertDType"); err != nil {
		return nil, err
	}
	if from, err := b.Builder.OpShape(x); err == nil && from.DType == dtypes.Float32 && dtype == dtypes.BFloat16 {
		return b.convertToBFloat16Nearest(x, from) // see bf16round.go
	}
	return b.Builder.ConvertDType(x, dtype)
}

func (b guardedBuilder) Bitcast(x backends.Op, dtype dtypes.DType) (backends.Op, error) {
	if err := b.checkDType(dtype, "Bitcast"); err != nil {
		return nil, err
	}
	return b.Builder.Bitcast(x, dtype)
}

func (b guardedBuilder) Iota(shape shapes.Shape, axis int) (backends.Op, error) {
	if err := b.checkDType(shape.DType, "Iota"); err != nil {
		return nil, err
	}
	return b.Builder.Iota(shape, axis)
}
