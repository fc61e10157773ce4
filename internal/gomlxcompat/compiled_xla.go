//go:build cgo && !noxla

package gomlxcompat

import (
	"fmt"
	"reflect"

	"github.com/gomlx/go-xla/pkg/pjrt"
	"github.com/gomlx/gomlx/backends/xla"
	"github.com/gomlx/gomlx/pkg/core/graph"
)

// loadedExecutable returns the PJRT executable of a graph compiled by the XLA backend.
//
// Assumption (GoMLX v0.26.0): graph.Graph keeps its compiled program in the unexported field
// "executable", which for the XLA backend holds an *xla.Executable whose unexported field "exec"
// is the *pjrt.LoadedExecutable.
func loadedExecutable(g *graph.Graph) (*pjrt.LoadedExecutable, error) {
	executable, err := unexportedField(reflect.ValueOf(g).Elem(), "executable")
	if err != nil {
		return nil, err
	}
	if executable.IsNil() {
		return nil, fmt.Errorf("graph %q is not compiled", g.Name())
	}
	xe, ok := executable.Interface().(*xla.Executable)
	if !ok {
		return nil, fmt.Errorf("graph %q was compiled by %T: %w", g.Name(), executable.Interface(), ErrNotXLA)
	}
	loaded, err := unexportedField(reflect.ValueOf(xe).Elem(), "exec")
	if err != nil {
		return nil, err
	}
	le, ok := loaded.Interface().(*pjrt.LoadedExecutable)
	if !ok || le == nil {
		return nil, fmt.Errorf("graph %q: the XLA executable holds %s, not a *pjrt.LoadedExecutable (GoMLX version changed?)",
			g.Name(), loaded.Type())
	}
	return le, nil
}

// CompiledMemory returns XLA's memory statistics of a graph compiled by the XLA backend, as
// go-xla read them from PJRT when it loaded the executable.
func CompiledMemory(g *graph.Graph) (MemoryStats, error) {
	le, err := loadedExecutable(g)
	if err != nil {
		return MemoryStats{}, err
	}
	s := le.OnDeviceMemoryUsageStats
	return MemoryStats{Inputs: s.Inputs, Outputs: s.Outputs, Aliases: s.Aliases, Temporary: s.Temporary,
		GeneratedCode: s.GeneratedCode}, nil
}
