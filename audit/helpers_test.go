package audit_test

import "github.com/onegpu/onegpu/internal/testkit"

// embedded is the embedded backend in sequential mode, shared by the tests.
var embedded = testkit.Embedded
