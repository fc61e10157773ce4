//go:build cgo && !noxla

package gomlxcompat

import (
	"fmt"
	"reflect"

	"github.com/gomlx/go-xla/pkg/stablehlo"
	"github.com/gomlx/gomlx/backends/xla"
	"github.com/gomlx/gomlx/pkg/core/graph"
)

// entryFunction returns the StableHLO function an XLA graph is built into, or nil for another backend.
func entryFunction(g *graph.Graph) (*stablehlo.Function, error) {
	builder, err := unexportedField(reflect.ValueOf(g).Elem(), "builder")
	if err != nil {
		return nil, err
	}
	if builder.IsNil() {
		return nil, fmt.Errorf("graph %q has no builder (finalized?)", g.Name())
	}
	xb, ok := builder.Interface().(*xla.Builder)
	if !ok {
		return nil, nil
	}
	fnField, err := unexportedField(reflect.ValueOf(xb).Elem(), "fn")
	if err != nil {
		return nil, err
	}
	fn, ok := fnField.Interface().(*stablehlo.Function)
	if !ok || fn == nil {
		return nil, fmt.Errorf("graph %q: the XLA builder's fn is %s, not a *stablehlo.Function (GoMLX version changed?)",
			g.Name(), fnField.Type())
	}
	return fn, nil
}
