package testkit

import (
	"strings"
	"testing"

	"github.com/onegpu/onegpu/internal/panics"
)

// MustPanic runs fn and fails t unless it panics with a message containing want; it returns the
// message. Graph builders report misuse by panicking (see panics.Panicf).
func MustPanic(t testing.TB, want string, fn func()) string {
	t.Helper()
	err := panics.Catch(fn)
	if err == nil {
		t.Errorf("no panic; want one saying %q", want)
		return ""
	}
	if !strings.Contains(err.Error(), want) {
		t.Errorf("panic %q; want one saying %q", err, want)
	}
	return err.Error()
}
