package analysis

import (
	"errors"
	"fmt"
	"sync"

	"github.com/gomlx/gomlx/pkg/core/graph"

	"github.com/onegpu/onegpu/internal/gomlxcompat"
	"github.com/onegpu/onegpu/internal/panics"
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
	if err := panics.Catch(func() { p.Graph.Compile(p.Outputs...) }); err != nil {
		return CompiledMemory{}, fmt.Errorf("compiling %q: %w", p.Graph.Name(), err)
	}
	return CompiledMemoryOf(p.Graph)
}

// CompilePrograms compiles ps at once, one goroutine each, as CompileProgram does, and returns
// their memory statistics in ps's order, or the error of the first program (in ps's order) that
// failed, once every compile has ended. XLA's
// CPU compiler runs mostly on one thread per program, so a step made of several programs (the
// streamed executor's stages) compiles in about the time of its slowest program on enough cores.
func CompilePrograms(ps ...*Program) ([]CompiledMemory, error) {
	mems := make([]CompiledMemory, len(ps))
	errs := make([]error, len(ps))
	var wg sync.WaitGroup
	for i, p := range ps {
		wg.Go(func() { mems[i], errs[i] = CompileProgram(p) })
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	return mems, nil
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
