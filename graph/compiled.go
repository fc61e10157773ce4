package graph

import (
	"errors"
	"fmt"

	"github.com/gomlx/gomlx/pkg/core/graph"

	"github.com/onegpu/onegpu/graph/internal/gomlxcompat"
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

// CompiledMemoryOf returns XLA's memory statistics for an already compiled graph (an error for a
// graph another backend compiled). GoMLX v0.26.0 keeps the PJRT executable in unexported fields:
// internal/gomlxcompat reads it.
func CompiledMemoryOf(g *graph.Graph) (CompiledMemory, error) {
	s, err := gomlxcompat.CompiledMemory(g)
	if errors.Is(err, gomlxcompat.ErrNotXLA) {
		return CompiledMemory{}, fmt.Errorf("%w: compiled memory statistics need XLA", err)
	}
	if err != nil {
		return CompiledMemory{}, err
	}
	return CompiledMemory{ArgumentBytes: s.Inputs, OutputBytes: s.Outputs, AliasBytes: s.Aliases,
		TemporaryBytes: s.Temporary, CodeBytes: s.GeneratedCode}, nil
}
