//go:build !cgo || noxla

package gomlxcompat

import (
	"fmt"

	"github.com/gomlx/gomlx/pkg/core/graph"
)

// CompiledMemory returns ErrNotXLA: this binary was built without XLA (no cgo).
func CompiledMemory(g *graph.Graph) (MemoryStats, error) {
	return MemoryStats{}, fmt.Errorf("graph %q: this binary was built without cgo, hence without XLA: %w", g.Name(), ErrNotXLA)
}
