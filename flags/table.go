package flags

//go:generate go run ./internal/gentables -in tables -out tables_gen.go

import (
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
	// Values lists the names a KindEnum flag accepts, as far as onegpu knows them; nil when
	// they are not tabulated.
	Values []string
	// Deprecated is set when the build marks the flag deprecated.
	Deprecated bool
	// NoOp is set when the build accepts the flag and ignores it.
	NoOp bool
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
	switch f.Kind {
	case KindBool:
		return "--" + f.Name + "=true|false"
	case KindInt:
		return "--" + f.Name + "=<" + f.Type() + ">"
	case KindFloat:
		return "--" + f.Name + "=<float>"
	case KindList:
		return "--" + f.Name + "=<item,item,...>"
	case KindEnum:
		if len(f.Values) > 0 {
			return "--" + f.Name + "=" + strings.Join(f.Values, "|")
		}
		return "--" + f.Name + "=<NAME>"
	}
	return "--" + f.Name + "=<text>"
}

// DescribeDefault says what the flag is set to when XLA_FLAGS does not mention it.
func (f Flag) DescribeDefault() string {
	switch {
	case f.DefaultComputed != "":
		return "computed by XLA (" + f.DefaultComputed + ")"
	case f.Default == "" && (f.Kind == KindString || f.Kind == KindList):
		return "empty"
	}
	return f.Default
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
