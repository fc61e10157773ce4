package flags

import (
	"slices"
	"strings"
)

// Setting is one flag as XLA_FLAGS writes it or a preset sets it.
type Setting struct {
	// Name is the flag's name without dashes. It is empty when Token is not of the form
	// --name or --name=value ("-x", "--", "--=1"): XLA reports such tokens as unknown flags.
	Name string
	// Value is what follows the first '=', quotes removed.
	Value string
	// HasValue is false for a bare --name, which only bool flags accept (as true).
	HasValue bool
	// Token is the argument as XLA sees it, quotes removed: "--xla_dump_to=/tmp/a b".
	Token string
	// Source says where the setting comes from: "XLA_FLAGS", "XLA_FLAGS file PATH",
	// "preset memory=90", or empty for text given to Parse.
	Source string
	// Reason says in one line why a preset sets the flag; empty for the user's flags.
	Reason string
	// Overrides names an earlier setting of the same flag that this one replaces, with its
	// source, e.g. "--xla_gpu_autotune_level=0 (preset fast-compile=0)"; empty when none.
	Overrides string
}

// settingOf splits one argument produced by tokenize.
func settingOf(arg string) Setting {
	st := Setting{Token: arg}
	if rest, ok := strings.CutPrefix(arg, "--"); ok {
		if name, value, has := strings.Cut(rest, "="); name != "" {
			st.Name, st.Value, st.HasValue = name, value, has
		}
	}
	return st
}

// newSetting returns the setting --name=value with its source and reason.
func newSetting(name, value, source, reason string) Setting {
	return Setting{Name: name, Value: value, HasValue: true, Token: "--" + name + "=" + value, Source: source, Reason: reason}
}

// String returns the setting as XLA_FLAGS text that XLA reads back as the same Token: the
// value is quoted when it holds blanks or starts with a quote.
func (st Setting) String() string {
	e := 0
	for e < len(st.Token) && isNameByte(st.Token[e]) {
		e++
	}
	if e < len(st.Token) && st.Token[e] == '=' {
		return st.Token[:e+1] + quoteValue(st.Token[e+1:])
	}
	return st.Token
}

// problemName is what a Problem calls the setting: its name, or its token when it has none.
func (st Setting) problemName() string {
	if st.Name != "" {
		return st.Name
	}
	return st.Token
}

// quoteValue quotes v so that XLA's tokenizer reads it back unchanged: single quotes when v
// holds none (nothing is special inside them), else double quotes with '\' and '"' escaped.
func quoteValue(v string) string {
	if !strings.ContainsAny(v, blanks) && (v == "" || v[0] != '\'' && v[0] != '"') {
		return v
	}
	if !strings.Contains(v, "'") {
		return "'" + v + "'"
	}
	var b strings.Builder
	b.WriteByte('"')
	for i := 0; i < len(v); i++ {
		if v[i] == '\\' || v[i] == '"' {
			b.WriteByte('\\')
		}
		b.WriteByte(v[i])
	}
	b.WriteByte('"')
	return b.String()
}

// Set is an ordered collection of flag settings: the user's XLA_FLAGS, a preset's flags, or
// both merged. Later settings of a flag override earlier ones, as in XLA, except for list
// flags that XLA appends to (xla_disable_hlo_passes). The zero Set holds no flags.
type Set struct {
	settings []Setting // in the order written, overridden ones included
	syntax   []Problem // what XLA would drop or misread while tokenizing the text
}

// Merge returns the settings of every set in order: a later set overrides an earlier one, so
// Merge(presets, user) lets the user's XLA_FLAGS win.
func Merge(sets ...Set) Set {
	var out Set
	for _, s := range sets {
		out.settings = append(out.settings, s.settings...)
		out.syntax = append(out.syntax, s.syntax...)
	}
	return out
}

// Settings returns the settings XLA would act on, in order: a setting is left out when a later
// one of the same flag replaces it, and the later one records it in Overrides. Settings of flags
// no build knows are all kept, since XLA rejects each of them.
func (s Set) Settings() []Setting {
	kept := make([]bool, len(s.settings))
	out := slices.Clone(s.settings)
	replacedBy := map[string]int{} // flag name -> index of a later setting replacing earlier ones
	for i := len(out) - 1; i >= 0; i-- {
		st := out[i]
		f, known := anyBuildLookup(st.Name)
		if st.Name == "" || !known || f.Kind == KindList && f.Appends {
			kept[i] = true
			continue
		}
		if j, ok := replacedBy[st.Name]; ok {
			if out[j].Overrides == "" {
				out[j].Overrides = st.String()
				if st.Source != "" {
					out[j].Overrides += " (" + st.Source + ")"
				}
			}
			continue
		}
		kept[i] = true
		if !(f.Edits && isListEdit(st.Value)) {
			replacedBy[st.Name] = i
		}
	}
	effective := out[:0:0]
	for i, st := range out {
		if kept[i] {
			effective = append(effective, st)
		}
	}
	return effective
}

// isListEdit reports whether v is made only of +NAME and -NAME items, which edit a list flag
// such as xla_gpu_enable_command_buffer instead of replacing it.
func isListEdit(v string) bool {
	if v == "" {
		return false
	}
	for _, item := range strings.Split(v, ",") {
		if len(item) < 2 || item[0] != '+' && item[0] != '-' {
			return false
		}
	}
	return true
}

// Lookup returns the last setting of the flag called name (without dashes).
func (s Set) Lookup(name string) (Setting, bool) {
	for i := len(s.settings) - 1; i >= 0; i-- {
		if s.settings[i].Name == name {
			return s.settings[i], true
		}
	}
	return Setting{}, false
}

// Len returns the number of settings XLA would act on (the length of Settings).
func (s Set) Len() int { return len(s.Settings()) }

// String renders the settings XLA would act on as an XLA_FLAGS value that Parse reads back as
// the same settings.
func (s Set) String() string {
	return render(s.Settings())
}

func render(settings []Setting) string {
	parts := make([]string, len(settings))
	for i, st := range settings {
		parts[i] = st.String()
	}
	return strings.Join(parts, " ")
}
