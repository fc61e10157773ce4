package platform_test

import "github.com/onegpu/onegpu/internal/testkit"

// The tests' backends and helpers, from testkit.
var (
	embedded          = testkit.Embedded
	xlaBackend        = testkit.XLA
	backendsUnderTest = testkit.ByName
	flatFloat64       = testkit.Floats
	randomTensor      = testkit.NormalTensor
)
