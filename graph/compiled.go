package graph

import (
	"fmt"
	"reflect"
	"unsafe"

	"github.com/gomlx/go-xla/pkg/pjrt"
	"github.com/gomlx/gomlx/backends/xla"
	"github.com/gomlx/gomlx/pkg/core/graph"
)

// CompiledMemory is XLA's own account of a compiled program's device memory, as JAX's
// compiled.memory_analysis() reports it.
type CompiledMemory struct {
	// ArgumentBytes are the inputs; OutputBytes the outputs; AliasBytes the outputs written over
	// donated inputs (counted in both); TemporaryBytes the scratch XLA allocates while running;
	// CodeBytes the generated code kept on the device.
	ArgumentBytes, OutputBytes, AliasBytes, TemporaryBytes, CodeBytes int64
}

// TotalBytes is the memory the program needs at once by XLA's account: arguments, outputs not
// aliased to arguments, temporaries and code.
func (c CompiledMemory) TotalBytes() int64 {
	return c.ArgumentBytes + c.OutputBytes - c.AliasBytes + c.TemporaryBytes + c.CodeBytes
}

// CompileProgram compiles p on its graph's backend (XLA only) and returns XLA's memory statistics
// for the compiled program. The graph is compiled for good: run it with p.Graph.Run or discard it.
// Building errors are returned, not panicked.
func CompileProgram(p *Program) (CompiledMemory, error) {
	if err := CatchPanic(func() { p.Graph.Compile(p.Outputs...) }); err != nil {
		return CompiledMemory{}, fmt.Errorf("compiling %q: %w", p.Graph.Name(), err)
	}
	return CompiledMemoryOf(p.Graph)
}

// CompiledMemoryOf returns XLA's memory statistics for an already compiled graph. GoMLX v0.26.0
// keeps the PJRT executable behind unexported fields (graph.Graph.executable ->
// xla.Executable.exec); they are read by reflection, and a changed layout is an error.
func CompiledMemoryOf(g *graph.Graph) (CompiledMemory, error) {
	executable, err := unexportedField(reflect.ValueOf(g).Elem(), "executable")
	if err != nil {
		return CompiledMemory{}, err
	}
	if executable.IsNil() {
		return CompiledMemory{}, fmt.Errorf("graph %q is not compiled", g.Name())
	}
	xe, ok := executable.Interface().(*xla.Executable)
	if !ok {
		return CompiledMemory{}, fmt.Errorf("graph %q was compiled by %T, not by the XLA backend: compiled memory statistics need XLA",
			g.Name(), executable.Interface())
	}
	loaded, err := unexportedField(reflect.ValueOf(xe).Elem(), "exec")
	if err != nil {
		return CompiledMemory{}, err
	}
	le, ok := loaded.Interface().(*pjrt.LoadedExecutable)
	if !ok || le == nil {
		return CompiledMemory{}, fmt.Errorf("graph %q: the XLA executable holds %s, not a *pjrt.LoadedExecutable", g.Name(), loaded.Type())
	}
	s := le.OnDeviceMemoryUsageStats
	return CompiledMemory{ArgumentBytes: s.Inputs, OutputBytes: s.Outputs, AliasBytes: s.Aliases,
		TemporaryBytes: s.Temporary, CodeBytes: s.GeneratedCode}, nil
}

// unexportedField returns a readable copy of the unexported field name of the struct value v.
func unexportedField(v reflect.Value, name string) (reflect.Value, error) {
	f := v.FieldByName(name)
	if !f.IsValid() {
		return reflect.Value{}, fmt.Errorf("%s has no field %q (GoMLX version changed?)", v.Type(), name)
	}
	return reflect.NewAt(f.Type(), unsafe.Pointer(f.UnsafeAddr())).Elem(), nil
}
