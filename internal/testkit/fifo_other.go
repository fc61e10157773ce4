//go:build !unix

package testkit

import (
	"errors"
	"fmt"
)

// MakeFIFO returns an error here: this system has no named pipes in its file system.
func MakeFIFO(path string) error {
	return fmt.Errorf("a named pipe at %s: %w", path, errors.ErrUnsupported)
}
