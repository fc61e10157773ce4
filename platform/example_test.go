package platform_test

import (
	"fmt"

	"github.com/onegpu/onegpu/platform"
)

// Resolve a backend spec without creating the backend.
func ExampleResolveBackend() {
	spec, err := platform.ResolveBackend("go:dotgeneral_large")
	fmt.Println(spec, err)
	_, err = platform.ResolveBackend("xla")
	fmt.Println(err != nil)
	// Output:
	// go:ops_sequential,dotgeneral_large <nil>
	// true
}
