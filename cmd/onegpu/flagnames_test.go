package main

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/onegpu/onegpu/recipes"
	"github.com/onegpu/onegpu/train"
)

// TestInFlags: the library's errors name Config and RunOptions fields; the CLI shows the flags that
// set them, and keeps the error's chain for errors.As.
func TestInFlags(t *testing.T) {
	config, err := recipes.Defaults("gpt", "tiny")
	if err != nil {
		t.Fatal(err)
	}
	config.Devices = train.Devices{Count: 1, Shard: train.ShardParams}
	err = config.Validate()
	inFlags(&err)
	if want := "--shard params needs several devices: set --devices N (N > 1) or use --shard none"; err == nil || err.Error() != want {
		t.Errorf("Validate with --shard params on one device: %v, want %q", err, want)
	}
	err = fmt.Errorf("step 3: %w", &train.DivergedError{Step: 3, Reason: "loss NaN", LastSaved: 2})
	inFlags(&err)
	var diverged *train.DivergedError
	if !errors.As(err, &diverged) || !strings.Contains(err.Error(), "lower the learning rate (--lr) or add a dynamic loss scale (--loss-scale)") {
		t.Errorf("a diverged run: %v (a *DivergedError: %v)", err, diverged != nil)
	}
	err = errors.New("no setting named")
	if inFlags(&err); err.Error() != "no setting named" {
		t.Errorf("an error naming no setting changed: %v", err)
	}
	var out bytes.Buffer
	fmt.Fprintf(flagWriter{&out}, "raise RunOptions.Steps to train further\n")
	if out.String() != "raise --steps to train further\n" {
		t.Errorf("flagWriter wrote %q", out.String())
	}
}
