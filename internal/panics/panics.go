package panics

import (
	"fmt"
)

// Catch runs fn and returns the panic it raised, if any, as an error. GoMLX graph builders
// report misuse by panicking; functions that take user input turn those panics into errors with it.
func Catch(fn func()) (err error) {
	defer func() {
		if r := recover(); r != nil {
			if e, ok := r.(error); ok {
				err = e
			} else {
				err = fmt.Errorf("%v", r)
			}
		}
	}()
	fn()
	return nil
}

// Panicf panics with an error formatted like fmt.Errorf, the way GoMLX's graph builders report
// misuse; Catch turns it back into that error. onegpu's graph-building packages (mixed,
// accum, optim) report misuse with it.
func Panicf(format string, args ...any) {
	panic(fmt.Errorf(format, args...))
}
