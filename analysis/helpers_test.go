package analysis_test

import "github.com/onegpu/onegpu/internal/testkit"

// The tests' backends, from testkit.
var (
	embedded   = testkit.Embedded
	requireXLA = testkit.RequireXLA
)
