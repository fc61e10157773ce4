package main

import (
	"flag"
	"fmt"
	"math"
)

// parseArgs parses a command's arguments and refuses what the flag package lets through: a
// word that is not a flag (the flag package stops there and would silently drop every flag
// after it), an explicit empty string (a flag left out gives its default; an empty one names
// nothing), and a NaN or infinite number, which no float flag means.
func parseArgs(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q: flags start with - (see %s -h)", fs.Arg(0), fs.Name())
	}
	var err error
	fs.Visit(func(f *flag.Flag) {
		getter, ok := f.Value.(flag.Getter)
		if err != nil || !ok {
			return
		}
		switch v := getter.Get().(type) {
		case float64:
			if math.IsNaN(v) || math.IsInf(v, 0) {
				err = fmt.Errorf("--%s %s: give a finite number", f.Name, f.Value)
			}
		case string:
			if v == "" {
				err = fmt.Errorf("--%s '': give a value, or leave the flag out for its default (%s)", f.Name, defaultText(f))
			}
		}
	})
	return err
}

// defaultText says what a flag gives when it is left out.
func defaultText(f *flag.Flag) string {
	if f.DefValue == "" {
		return "see -h"
	}
	return f.DefValue
}

// given returns the names of the flags the command line set, so that a default is applied only
// where a flag was left out and an explicit value is always checked.
func given(fs *flag.FlagSet) map[string]bool {
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	return set
}

// atLeast returns an error when a flag the command line set is below min.
func atLeast(set map[string]bool, name string, value, min int) error {
	if set[name] && value < min {
		return fmt.Errorf("--%s %d: must be at least %d", name, value, min)
	}
	return nil
}

// notApplicable returns an error naming the first of the given flags that the command line set,
// with why it does not apply.
func notApplicable(set map[string]bool, why string, names ...string) error {
	for _, name := range names {
		if set[name] {
			return fmt.Errorf("--%s does not apply: %s", name, why)
		}
	}
	return nil
}
