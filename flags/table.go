package flags

//go:generate go run ./internal/gentables -in tables -out tables_gen.go

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
)

// Kind is the type of value an XLA flag takes.
type Kind int

// The kinds of XLA flags. XLA itself knows bool, int32, int64, float and string; list and enum
// are strings that XLA's own setters split on commas or look up in a proto enum.
const (
	KindBool   Kind = iota + 1 // true, false, 1 or 0; a bare --name means true
	KindInt                    // a decimal integer of Flag.Bits bits
	KindFloat                  // a float32 in decimal notation, inf or nan
	KindString                 // any text, possibly empty
	KindList                   // comma-separated items
	KindEnum                   // the name of one value of a proto enum
)

// String returns the kind's name as the tables write it ("bool", "int", ...).
func (k Kind) String() string {
	switch k {
	case KindBool:
		return "bool"
	case KindInt:
		return "int"
	case KindFloat:
		return "float"
	case KindString:
		return "string"
	case KindList:
		return "list"
	case KindEnum:
		return "enum"
	}
	return "kind?"
}

// Flag describes one XLA flag as one build of XLA defines it.
type Flag struct {
	// Name is the flag's name without the leading dashes, e.g. "xla_gpu_autotune_level".
	Name string
	// Kind is the type of value the flag takes.
	Kind Kind
	// Bits is the width of a KindInt flag: 32 or 64. It is 0 for other kinds.
	Bits int
	// Default is the value XLA starts with, written as in XLA_FLAGS. It is empty for empty
	// strings and lists, and when DefaultComputed is set.
	Default string
	// DefaultComputed is set when XLA computes the default at run time (it depends on the
	// machine or on a constant the table does not give): it holds what computes it.
	DefaultComputed string
	// Appends is set for a KindList flag whose every occurrence adds to the list instead of
	// replacing it (xla_disable_hlo_passes).
	Appends bool
	// Edits is set for a KindList flag that also takes +NAME/-NAME items, which edit the
	// current list instead of replacing it (xla_gpu_enable_command_buffer).
	Edits bool
	// Form says which values of its kind the build accepts: FormAny for most flags; for the
	// flags XLA parses with setters of their own (enums, lists of names, xla_fuel, ...), what
	// their values must look like on this build, or FormUnknown when onegpu does not know.
	Form Form
	// Values lists the spellings the build accepts for a FormEnum flag, or for the items of a
	// FormNames list, as flags/tables says (probed from the plugin for cpu-0.115); nil for the
	// other forms.
	Values []string
	// FoldCase is set when the build accepts Values in any case.
	FoldCase bool
	// AcceptsEmpty is set when the build accepts the empty value for a FormEnum or FormNames
	// flag (an empty list).
	AcceptsEmpty bool
	// AcceptsEdits is set when a FormNames list also takes +NAME/-NAME items (every item
	// signed), which add to or remove from the current list.
	AcceptsEdits bool
	// Deprecated is set when the build marks the flag deprecated.
	Deprecated bool
	// NoOp is set when the build accepts the flag and ignores it.
	NoOp bool
	// Ranged is set for a KindInt flag whose values XLA handles only from Min to Max
	// (inclusive), as flags/tables/ranges.tsv says with its evidence; OutOfRange says what XLA
	// does with the others (aborts the process, fails every compile, hangs).
	Ranged     bool
	Min, Max   int64
	OutOfRange string
}

// Form is the shape of the values a build accepts for a flag, beyond its kind. XLA parses most
// flags by kind (bool, int, float, any text) but some with setters of their own, which refuse
// what they do not recognize and abort the process ("Flag parsing failed").
type Form int

// The forms of values. The zero Form is FormAny.
const (
	// FormAny: any value of the flag's kind; for string and list flags, any text.
	FormAny Form = iota
	// FormUnknown: XLA parses the flag with a setter of its own and onegpu does not know which
	// values this build's setter takes, so Check refuses every explicit value.
	FormUnknown
	// FormEnum: one of Flag.Values (in any case when FoldCase).
	FormEnum
	// FormNames: comma-separated items of Flag.Values, or +NAME/-NAME items when AcceptsEdits,
	// or the empty list when AcceptsEmpty.
	FormNames
	// FormPairs: comma-separated NAME=INTEGER items (xla_fuel); never empty.
	FormPairs
	// FormRanges: comma-separated ranges of non-negative integers: N, N:M with N <= M, N: or :M.
	FormRanges
	// FormDuration: a duration as absl::ParseDuration reads it: 30s, 1h30m, 1.5ms, 0 or inf.
	FormDuration
)

// String names the form as flags/tables writes it ("any", "unknown", "enum", ...).
func (f Form) String() string {
	switch f {
	case FormAny:
		return "any"
	case FormUnknown:
		return "unknown"
	case FormEnum:
		return "enum"
	case FormNames:
		return "names"
	case FormPairs:
		return "pairs"
	case FormRanges:
		return "ranges"
	case FormDuration:
		return "duration"
	}
	return "form?"
}

// Type names the flag's value type as XLA does, with the width of integers: "bool", "int32",
// "int64", "float", "string", "list" or "enum".
func (f Flag) Type() string {
	if f.Kind == KindInt {
		if f.Bits == 64 {
			return "int64"
		}
		return "int32"
	}
	return f.Kind.String()
}

// Syntax returns how to write the flag with a placeholder for its value, e.g.
// "--xla_gpu_autotune_level=<int32>".
func (f Flag) Syntax() string {
	values := strings.Join(f.Values, "|")
	if f.Name == backendExtraOptions {
		return "--" + f.Name + "=xla_KEY[=VALUE][,...] (XLA's own options; leave LLVM's out), or leave it unset"
	}
	switch f.Form {
	case FormUnknown:
		return "leave --" + f.Name + " unset (onegpu does not know the values this build accepts)"
	case FormEnum:
		return "--" + f.Name + "=" + values
	case FormNames:
		s := "--" + f.Name + "=<item,item,...> with items " + values
		if f.AcceptsEdits {
			s += ", or +item,-item,... to edit the list"
		}
		return s
	case FormPairs:
		return "--" + f.Name + "=PASS=N[,PASS=N...]"
	case FormRanges:
		return "--" + f.Name + "=N|N:M|N:|:M[,...]"
	case FormDuration:
		return "--" + f.Name + "=<duration: 30s, 1h30m, 1.5ms, 0 or inf>"
	}
	switch f.Kind {
	case KindBool:
		return "--" + f.Name + "=true|false"
	case KindInt:
		if f.Ranged {
			return fmt.Sprintf("--%s=<%s from %d to %d>", f.Name, f.Type(), f.Min, f.Max)
		}
		return "--" + f.Name + "=<" + f.Type() + ">"
	case KindFloat:
		return "--" + f.Name + "=<float>"
	case KindList:
		return "--" + f.Name + "=<item,item,...>"
	case KindEnum:
		return "--" + f.Name + "=<NAME>"
	}
	return "--" + f.Name + "=<text>"
}

// DescribeDefault says what the flag is set to when XLA_FLAGS does not mention it.
func (f Flag) DescribeDefault() string {
	d := f.Default
	switch {
	case f.DefaultComputed != "":
		return "computed by XLA (" + f.DefaultComputed + ")"
	case f.Default == "" && (f.Kind == KindString || f.Kind == KindList):
		d = "empty"
	}
	switch {
	case f.Form == FormUnknown:
		d += " (onegpu knows no value the build accepts: leave the flag unset to get it)"
	case f.DefaultRefused() != "":
		d += " (the build refuses it written out: leave the flag unset to get it)"
	}
	return d
}

// DefaultRefused returns why the build refuses the flag's default written out in XLA_FLAGS, or
// "" when it accepts it. Some setters refuse the empty value that is their own default (xla_fuel,
// xla_gpu_disable_async_collectives), and a FormUnknown flag takes no explicit value at all: such
// a default is had by leaving the flag unset. A computed default, which has no written form, is
// never refused.
func (f Flag) DefaultRefused() string {
	if f.DefaultComputed != "" || f.NoOp {
		return ""
	}
	return badValue(f, f.Default)
}

// buildInfo is one generated flag table with what onegpu knows of its build.
type buildInfo struct {
	build                Build
	platform             string // PJRT platform: "cuda", "cpu", or "source" for XLA's source tree
	pjrtMajor, pjrtMinor int    // PJRT C API version of the build's plugin; -1 when none is loaded
	description          string
	table                string // the TSV file the table was generated from
	flags                []Flag // sorted by name
}

// index maps each build to its table, and each flag name to the builds defining it.
var index = sync.OnceValue(func() map[Build]*buildInfo {
	m := make(map[Build]*buildInfo, len(builds))
	for i := range builds {
		m[builds[i].build] = &builds[i]
	}
	return m
})

func infoOf(b Build) (*buildInfo, bool) {
	info, ok := index()[b]
	return info, ok
}

// Lookup returns the flag called name (without dashes) as build b defines it.
func (b Build) Lookup(name string) (Flag, bool) {
	info, ok := infoOf(b)
	if !ok {
		return Flag{}, false
	}
	i := sort.Search(len(info.flags), func(i int) bool { return info.flags[i].Name >= name })
	if i < len(info.flags) && info.flags[i].Name == name {
		f := info.flags[i]
		f.Values = slices.Clone(f.Values) // the caller may change its copy, not the table
		return f, true
	}
	return Flag{}, false
}

// Flags returns every flag build b defines, sorted by name.
func (b Build) Flags() []Flag {
	info, ok := infoOf(b)
	if !ok {
		return nil
	}
	out := slices.Clone(info.flags)
	for i := range out {
		out[i].Values = slices.Clone(out[i].Values)
	}
	return out
}

// anyBuildLookup returns the flag from the newest build that defines it. The kind of a flag
// decides how repeated settings merge, and no flag of the tables changes kind between builds.
func anyBuildLookup(name string) (Flag, bool) {
	for i := len(builds) - 1; i >= 0; i-- {
		if f, ok := builds[i].build.Lookup(name); ok {
			return f, true
		}
	}
	return Flag{}, false
}
