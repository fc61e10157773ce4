package main

import (
	"fmt"
	"strconv"
)

// compareOptimizers are the optimizers `onegpu compare` can run on both sides, and what the JAX
// reference (reference/jax/tutorial.py --optimizer) runs for each: the optax optimizer that
// computes the same update.
var compareOptimizers = map[string]string{
	"adam":      "optax.adam",
	"adamw":     "optax.adamw (decoupled weight decay times the learning rate, on every parameter)",
	"adafactor": "optax.adafactor (its defaults, the schedule as learning rate)",
}

// referenceOptimizerArgs returns the reference's arguments that make it train with the optax
// counterpart of onegpu's optimizer name ("" is adam) and weight decay, or an error naming both
// sides when there is none.
func referenceOptimizerArgs(name string, weightDecay float64) ([]string, error) {
	if name == "" {
		name = "adam"
	}
	switch name {
	case "adam8bit":
		return nil, fmt.Errorf("onegpu's adam8bit cannot be compared with JAX's optax.adam: optax has no block-wise 8-bit Adam, "+
			"so the losses would differ by the 8-bit moments, not by a mistake; compare --optimizer %s", compareOptimizerNames)
	case "adam":
		if weightDecay != 0 {
			return nil, fmt.Errorf("onegpu's adam with weight decay %g has no optax counterpart but adamw: use --optimizer adamw", weightDecay)
		}
	}
	if _, ok := compareOptimizers[name]; !ok {
		return nil, fmt.Errorf("onegpu's optimizer %q has no counterpart in the JAX reference: compare --optimizer %s", name, compareOptimizerNames)
	}
	args := []string{"--optimizer", name}
	if weightDecay != 0 {
		args = append(args, "--weight-decay", strconv.FormatFloat(weightDecay, 'g', -1, 64))
	}
	return args, nil
}

// compareOptimizerNames lists the optimizers compare runs on both sides.
const compareOptimizerNames = "adam, adamw or adafactor"
