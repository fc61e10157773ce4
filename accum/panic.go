package accum

import "fmt"

// panicf panics with an error, the way GoMLX's graph-building functions report misuse.
func panicf(format string, args ...any) {
	panic(fmt.Errorf(format, args...))
}
