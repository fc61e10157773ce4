//go:build !cgo || noxla

package gomlxcompat

import (
	"github.com/gomlx/go-xla/pkg/stablehlo"
	"github.com/gomlx/gomlx/pkg/core/graph"
)

// entryFunction returns nil: without cgo there is no XLA backend, so no graph is built into a
// StableHLO function.
func entryFunction(*graph.Graph) (*stablehlo.Function, error) { return nil, nil }
