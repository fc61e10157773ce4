package gomlxcompat

import "fmt"

// ErrNotXLA is wrapped by the hooks that need a graph built or compiled by the XLA backend when
// they are given one of another backend (or when the binary was built without XLA).
var ErrNotXLA = fmt.Errorf("not an XLA graph")

// MemoryStats is XLA's account of a compiled program's device memory, in bytes, as PJRT reports
// it (go-xla's pjrt.ExecutableMemoryUsageStats, which exists only in cgo builds).
type MemoryStats struct {
	Inputs, Outputs, Aliases, Temporary, GeneratedCode int64
}
