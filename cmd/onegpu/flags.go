package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/onegpu/onegpu/flags"
)

func init() {
	register(command{
		name:    "flags",
		summary: "show the XLA_FLAGS onegpu hands to XLA, or check an XLA_FLAGS string",
		run:     func(args []string) error { return runFlags(args, os.Stdout) },
	})
}

// runFlags runs `onegpu flags [check] ...`, writing its report to w.
func runFlags(args []string, w io.Writer) error {
	if len(args) > 0 && args[0] == "check" {
		return runFlagsCheck(args[1:], w)
	}
	return runFlagsShow(args, w)
}

// presetFlags collects repeated --preset values.
type presetFlags []flags.Preset

// String lists the presets given so far, as the flag package shows defaults.
func (p *presetFlags) String() string {
	names := make([]string, len(*p))
	for i, preset := range *p {
		names[i] = preset.Name()
	}
	return strings.Join(names, " ")
}

// Set adds the preset spec names (see flags.ParsePreset).
func (p *presetFlags) Set(spec string) error {
	preset, err := flags.ParsePreset(spec)
	if err != nil {
		return err
	}
	*p = append(*p, preset)
	return nil
}

const buildUsage = "XLA build whose flags to check against: %s (default: the build of the plugin named by " +
	flags.PluginEnv + " or " + flags.GoMLXBackendEnv + "=xla:..., else cuda-0.11)"

// chooseBuild returns the build named by --build, or the default one, with why it was chosen.
func chooseBuild(name string) (flags.Build, string, error) {
	if name == "" {
		b, why := flags.DefaultBuild()
		return b, why, nil
	}
	b, err := flags.ParseBuild(name)
	return b, "chosen with --build", err
}

func buildNames() string {
	names := make([]string, 0, 4)
	for _, b := range flags.Builds() {
		names = append(names, string(b))
	}
	return strings.Join(names, ", ")
}

// settingJSON is one effective flag in the JSON reports.
type settingJSON struct {
	Text      string `json:"text"`
	Flag      string `json:"flag,omitempty"`
	Value     string `json:"value,omitempty"`
	Source    string `json:"source,omitempty"`
	Why       string `json:"why"`
	Overrides string `json:"overrides,omitempty"`
}

// flagsReport is the JSON form of both `onegpu flags` and `onegpu flags check`.
type flagsReport struct {
	Build            flags.Build     `json:"build"`
	BuildDescription string          `json:"build_description"`
	BuildReason      string          `json:"build_reason"`
	Input            *string         `json:"input,omitempty"`
	Presets          []string        `json:"presets,omitempty"`
	Accepted         bool            `json:"accepted"`
	XLAFlags         string          `json:"xla_flags"`
	Settings         []settingJSON   `json:"settings"`
	Warnings         []flags.Problem `json:"warnings"`
	Errors           []flags.Problem `json:"errors"`
}

func newReport(b flags.Build, why string, set flags.Set, warnings []flags.Problem, err error) (flagsReport, error) {
	r := flagsReport{Build: b, BuildDescription: b.Describe(), BuildReason: why, XLAFlags: set.String(),
		Settings: []settingJSON{}, Warnings: warnings, Errors: []flags.Problem{}}
	if r.Warnings == nil {
		r.Warnings = []flags.Problem{}
	}
	if err != nil {
		problems, ok := err.(flags.Problems)
		if !ok {
			return r, err
		}
		r.Errors = problems
	}
	r.Accepted = len(r.Errors) == 0
	for _, st := range set.Settings() {
		r.Settings = append(r.Settings, settingJSON{Text: st.String(), Flag: st.Name, Value: st.Value,
			Source: st.Source, Why: explain(st, b), Overrides: st.Overrides})
	}
	return r, nil
}

// explain says in one line why a setting is there and what it is.
func explain(st flags.Setting, b flags.Build) string {
	why := st.Reason
	if why == "" {
		if f, ok := b.Lookup(st.Name); ok {
			why = fmt.Sprintf("%s flag, default %s", f.Type(), f.DescribeDefault())
		} else {
			why = "not a flag of " + string(b)
		}
	}
	if st.Source != "" {
		why = st.Source + ": " + why
	}
	if st.Overrides != "" {
		why += "; overrides " + st.Overrides
	}
	return why
}

func runFlagsShow(args []string, w io.Writer) error {
	fs := newFlagSet("flags", "[--build B] [--preset P]... [--json]\n"+
		"       onegpu flags check [--build B] [--json] \"XLA_FLAGS string\"\n\n"+
		"Prints the XLA_FLAGS onegpu hands to XLA: the presets' flags, overridden by the user's XLA_FLAGS,\n"+
		"one line of explanation each, after checking them against the build. Presets:\n"+flags.PresetUsage())
	buildName := fs.String("build", "", fmt.Sprintf(buildUsage, buildNames()))
	var presets presetFlags
	fs.Var(&presets, "preset", "add a preset's flags (repeatable); see the list above (default: none)")
	asJSON := fs.Bool("json", false, "print the report as JSON")
	if err := parseArgs(fs, args); err != nil {
		if fs.NArg() > 0 {
			return fmt.Errorf("unexpected argument %q: to check an XLA_FLAGS string, run onegpu flags check %q", fs.Arg(0), strings.Join(fs.Args(), " "))
		}
		return err
	}
	b, why, err := chooseBuild(*buildName)
	if err != nil {
		return err
	}
	user, _ := flags.Environment() // its problems come back from Resolve
	set, warnings, resolveErr := flags.Resolve(b, user, presets...)
	report, err := newReport(b, why, set, warnings, resolveErr)
	if err != nil {
		return err
	}
	for _, p := range presets {
		report.Presets = append(report.Presets, p.Name())
	}
	if *asJSON {
		if err := writeJSON(w, report); err != nil {
			return err
		}
	} else {
		fmt.Fprintf(w, "build %s: %s (%s)\n", b, b.Describe(), why)
		if !report.Accepted {
			fmt.Fprintf(w, "XLA of build %s would abort on these flags, or drop some silently:\n", b)
			writeProblems(w, report.Errors)
		} else if len(report.Settings) == 0 {
			fmt.Fprintln(w, "XLA_FLAGS is empty: XLA runs with the build's defaults")
		} else {
			fmt.Fprintf(w, "XLA_FLAGS=%s\n", shellQuote(report.XLAFlags))
			writeSettings(w, report.Settings)
		}
		writeWarnings(w, report.Warnings)
	}
	if !report.Accepted {
		return &exitError{code: 1}
	}
	return nil
}

func runFlagsCheck(args []string, w io.Writer) error {
	fs := newFlagSet("flags check", "[--build B] [--json] \"XLA_FLAGS string\"\n\n"+
		"Exits 0 when XLA of build B accepts the string as XLA_FLAGS, else 1 with the reasons. Quote the\n"+
		"string; without one, checks this process's XLA_FLAGS. A string that does not start with '-' names\n"+
		"a flags file, as in XLA.")
	buildName := fs.String("build", "", fmt.Sprintf(buildUsage, buildNames()))
	asJSON := fs.Bool("json", false, "print the report as JSON")
	ours, text := splitCheckArgs(args)
	if err := parseArgs(fs, ours); err != nil {
		return err
	}
	b, why, err := chooseBuild(*buildName)
	if err != nil {
		return err
	}
	input := strings.Join(text, " ")
	if len(text) == 0 {
		input = os.Getenv(flags.EnvVar)
	}
	set, _ := flags.ParseEnv(input) // its problems come back from Check
	warnings, checkErr := set.Check(b)
	report, err := newReport(b, why, set, warnings, checkErr)
	if err != nil {
		return err
	}
	report.Input = &input
	if *asJSON {
		if err := writeJSON(w, report); err != nil {
			return err
		}
	} else {
		switch {
		case !report.Accepted:
			fmt.Fprintf(w, "rejected: XLA of build %s (%s) would abort on these flags, or drop some silently:\n", b, b.Describe())
			writeProblems(w, report.Errors)
		case len(report.Settings) == 0:
			fmt.Fprintf(w, "ok: no flags, which XLA of build %s accepts\n", b)
		default:
			fmt.Fprintf(w, "ok: XLA of build %s (%s) accepts these %d flags:\n", b, b.Describe(), len(report.Settings))
			writeSettings(w, report.Settings)
		}
		writeWarnings(w, report.Warnings)
	}
	if !report.Accepted {
		return &exitError{code: 1}
	}
	return nil
}

// splitCheckArgs separates onegpu's own flags (--build, --json, -h) from the XLA_FLAGS text,
// which starts with dashes too. No XLA flag is called build, json or help, so a word that names
// one of ours is ours wherever it stands; "--" ends onegpu's flags.
func splitCheckArgs(args []string) (ours, text []string) {
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			return ours, append(text, args[i+1:]...)
		}
		trimmed := strings.TrimPrefix(strings.TrimPrefix(a, "-"), "-")
		name, _, hasValue := strings.Cut(trimmed, "=")
		if trimmed == a || (name != "build" && name != "json" && name != "h" && name != "help") {
			text = append(text, a)
			continue
		}
		ours = append(ours, a)
		if name == "build" && !hasValue && i+1 < len(args) {
			ours = append(ours, args[i+1])
			i++
		}
	}
	return ours, text
}

func writeSettings(w io.Writer, settings []settingJSON) {
	width := 0
	for _, st := range settings {
		width = max(width, len(st.Text))
	}
	width = min(width, 60)
	for _, st := range settings {
		fmt.Fprintf(w, "  %-*s  %s\n", width, st.Text, st.Why)
	}
}

func writeProblems(w io.Writer, problems []flags.Problem) {
	for _, p := range problems {
		fmt.Fprintf(w, "  %s: %s\n", p.Flag, p.Message)
		if p.Fix != "" {
			fmt.Fprintf(w, "      fix: %s\n", p.Fix)
		}
	}
}

func writeWarnings(w io.Writer, warnings []flags.Problem) {
	for _, p := range warnings {
		fmt.Fprintf(w, "warning: %s\n", p.Error())
	}
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false) // keep "->" and "<" readable
	return enc.Encode(v)
}

// shellQuote quotes s for a POSIX shell, so that the printed XLA_FLAGS line can be pasted.
func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
