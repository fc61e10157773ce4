package main

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/onegpu/onegpu/flags/internal/pjrtprobe"
)

// fakeXLA stands for a child process that creates a client: it answers for XLA_FLAGS holding one
// flag as XLA does, for the flags xla_s (string), xla_b (bool), xla_f (float), xla_i (int32),
// xla_l (int64), xla_c (a setter that takes only the empty list) and xla_t (in the tables).
const fakeXLA = `
bad() { echo "E0000 command_line_flags.cc:93] Couldn't interpret value" >&2; echo "F0000 Flag parsing failed." >&2; exit 1; }
case "$XLA_FLAGS" in
"" | --xla_s=* | --xla_t=* | --xla_b=true | --xla_b=false | --xla_f=1.5 | --xla_f=1 | --xla_i=1 | --xla_l=1 | --xla_l=4294967296 | --xla_c=) ;;
--xla_b=* | --xla_f=* | --xla_i=* | --xla_l=* | --xla_c=*) bad ;;
*) echo "F0000 parse_flags_from_env.cc:234] Unknown flag in XLA_FLAGS: $XLA_FLAGS" >&2; exit 1 ;;
esac
echo "pjrtprobe: client platform=cpu pjrt=0.115"
`

func fakeProber(t *testing.T) pjrtprobe.Prober {
	return pjrtprobe.Prober{Plugin: "/fake/plugin.so", Command: []string{"sh", "-c", fakeXLA}}
}

func TestInferType(t *testing.T) {
	want := map[string]string{"xla_s": "string", "xla_b": "bool", "xla_f": "float", "xla_i": "int32", "xla_l": "int64", "xla_c": "custom"}
	for name, typ := range want {
		in, err := inferType(context.Background(), fakeProber(t), name)
		if err != nil || in.typ != typ {
			t.Errorf("inferType(%s) = %+v, %v; want %s", name, in, err, typ)
		}
	}
	if _, err := inferType(context.Background(), fakeProber(t), "xla_nope"); err == nil || !strings.Contains(err.Error(), "Unknown flag") {
		t.Errorf("inferType of an unknown flag: %v, want an error", err)
	}
}

// TestRun derives a table with the fake plugin: rows of known table names come from the newest
// table, extra names get inferred types, unknown names are listed, and a second run gives the
// same file.
func TestRun(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("plugin.so", "not really a plugin")
	write("builds.tsv", "# oldest first\nold\told.tsv\tcpu\t0.1\tan old build\nnew\tnew.tsv\tcpu\t0.2\ta newer build\n"+
		"derived\tderived.tsv\tcpu\t0.115\tthe plugin's build\n")
	write("old.tsv", "xla_t\tbool\tfalse\t\nxla_gone\tint32\t3\t\n")
	write("new.tsv", "xla_t\tbool\ttrue\tDEPRECATED\nxla_s\tstring\t\"x\"\t\n")
	write("derived.tsv", "xla_stale\tbool\tfalse\t\n") // the output is no source of itself
	write("extra.txt", "# extra names\nxla_b\nxla_l  # a comment\nxla_c\nxla_t\nxla_also_gone\n")
	write("custom.tsv", "xla_c\tlist-append\t\t\t\n")
	write("values.tsv", "# build(s)\tflag\tform\tvalues\tevidence\n")
	o := options{plugin: filepath.Join(dir, "plugin.so"), tables: dir, extra: filepath.Join(dir, "extra.txt"),
		out: filepath.Join(dir, "derived.tsv"), values: filepath.Join(dir, "values_derived.tsv"), workers: 3,
		child: []string{"sh", "-c", fakeXLA}, log: io.Discard}
	if err := run(o); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(o.out)
	if err != nil {
		t.Fatal(err)
	}
	var rows []string
	for _, line := range strings.Split(strings.TrimSpace(string(got)), "\n") {
		if !strings.HasPrefix(line, "#") {
			rows = append(rows, line)
		}
	}
	want := []string{"xla_b\tbool\t\t", "xla_c\tcustom\t\t", "xla_l\tint64\t\t", "xla_s\tstring\t\"x\"\t", "xla_t\tbool\ttrue\tDEPRECATED"}
	if strings.Join(rows, "\n") != strings.Join(want, "\n") {
		t.Errorf("rows:\n%s\nwant:\n%s", strings.Join(rows, "\n"), strings.Join(want, "\n"))
	}
	for _, phrase := range []string{"platform cpu, PJRT C API 0.115", "Probed 7 names (3 from the other tables, 4 from extra.txt): 5 known, 2 unknown",
		"#   xla_l: int64 (", "#   xla_also_gone xla_gone\n"} {
		if !strings.Contains(string(got), phrase) {
			t.Errorf("the output lacks %q:\n%s", phrase, got)
		}
	}
	values, err := os.ReadFile(o.values)
	if err != nil {
		t.Fatal(err)
	}
	// xla_c, the one custom flag, takes only the empty value: no row, so Check refuses it all.
	for _, phrase := range []string{"platform cpu, PJRT C API 0.115", "-values flags/tables/values_derived.tsv",
		"Probed 1 custom flags", "0 rows", "#   xla_c takes the empty value only"} {
		if !strings.Contains(string(values), phrase) {
			t.Errorf("the values lack %q:\n%s", phrase, values)
		}
	}
	if err := run(o); err != nil {
		t.Fatal(err)
	}
	if again, _ := os.ReadFile(o.out); string(again) != string(got) {
		t.Error("a second run wrote another file")
	}
	if again, _ := os.ReadFile(o.values); string(again) != string(values) {
		t.Error("a second run wrote other values")
	}

	write("builds.tsv", "derived\tderived.tsv\tcpu\t0.114\tthe wrong version\n")
	if err := run(o); err == nil || !strings.Contains(err.Error(), "PJRT C API 0.114") {
		t.Errorf("run with a builds.tsv that disagrees with the plugin: %v", err)
	}
}

func TestReadNames(t *testing.T) {
	path := filepath.Join(t.TempDir(), "names.txt")
	if err := os.WriteFile(path, []byte("xla_a\n\n  # only a comment\nxla_b # why\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if names, err := readNames(path); err != nil || strings.Join(names, " ") != "xla_a xla_b" {
		t.Errorf("readNames = %v, %v", names, err)
	}
	if err := os.WriteFile(path, []byte("--xla_a=1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := readNames(path); err == nil {
		t.Error("readNames accepted --xla_a=1")
	}
}

// fakeSetters stands for a child whose XLA has setters of their own, for one flag at a time:
// xla_e takes none or warning (case-sensitive), xla_f on or off in any case, xla_n a list of
// A and B in any case (or +/- edits of them, or nothing), xla_t any text, xla_z nothing.
const fakeSetters = `
bad() { echo "F0000 Flag parsing failed." >&2; exit 1; }
name=${XLA_FLAGS%%=*}
val=${XLA_FLAGS#*=}
lower=$(printf %s "$val" | tr A-Z a-z)
case "$name" in
"") ;;
--xla_e) case "$val" in none|warning) ;; *) bad ;; esac ;;
--xla_f) case "$lower" in on|off) ;; *) bad ;; esac ;;
--xla_n)
	if [ -n "$val" ]; then
		signed=0; plain=0; IFS=,
		for item in $lower; do
			case "$item" in [+-]a|[+-]b) signed=1 ;; a|b) plain=1 ;; *) bad ;; esac
		done
		[ $((signed + plain)) = 1 ] || bad
	fi ;;
--xla_t) ;;
--xla_z) bad ;;
*) echo "F0000 Unknown flag in XLA_FLAGS: $XLA_FLAGS" >&2; exit 1 ;;
esac
echo "pjrtprobe: client platform=cpu pjrt=0.115"
`

func TestDeriveValues(t *testing.T) {
	p := pjrtprobe.Prober{Plugin: "/fake/plugin.so", Command: []string{"sh", "-c", fakeSetters}}
	flags := []valueFlag{
		{name: "xla_e", kind: "enum", protos: []string{"DETECTION_MODE_NONE", "DETECTION_MODE_WARNING"}},
		{name: "xla_f", kind: "enum", protos: []string{"COLLECTIVE_PIPELINING_MODE_ON", "COLLECTIVE_PIPELINING_MODE_OFF"}},
		{name: "xla_n", kind: "list-edit", protos: []string{"A", "B"}},
		{name: "xla_t", kind: "list-append"},
		{name: "xla_z", kind: "enum", protos: []string{"Z"}},
	}
	results, children, err := deriveValues(context.Background(), p, 4, flags)
	if err != nil {
		t.Fatal(err)
	}
	want := []struct{ form, values, inEvidence, inNote string }{
		{"enum", "none=DETECTION_MODE_NONE,warning=DETECTION_MODE_WARNING", "case-sensitive; no proto name", ""},
		{"enum fold", "on=COLLECTIVE_PIPELINING_MODE_ON,off=COLLECTIVE_PIPELINING_MODE_OFF", "in lower, upper and title case", ""},
		{"names empty edits fold", "A,B", "all of them together too", ""},
		{"any", "", "takes any text", ""},
		{"", "", "", "refuses all"},
	}
	for i, w := range want {
		r := results[i]
		if r.form != w.form || r.values != w.values || !strings.Contains(r.evidence, w.inEvidence) || !strings.Contains(r.note, w.inNote) {
			t.Errorf("%s: %+v; want form %q, values %q, %q in the evidence and %q in the note", flags[i].name, r, w.form, w.values, w.inEvidence, w.inNote)
		}
	}
	if children < 50 {
		t.Errorf("only %d children", children)
	}
}

func TestCandidates(t *testing.T) {
	got := candidates([]string{"DETECTION_MODE_NONE", "DETECTION_MODE_FAIL"})
	for _, want := range []string{"DETECTION_MODE_NONE", "mode_none", "MODE_NONE", "none", "NONE", "fail", "", "on", probeText} {
		if !slices.Contains(got, want) {
			t.Errorf("candidates lack %q: %q", want, got)
		}
	}
	for _, unwanted := range []string{"detection_mode", "MODE", "detection_mode_none"} {
		if slices.Contains(got, unwanted) {
			t.Errorf("candidates have %q, a run every name has or a case variant of a whole name: %q", unwanted, got)
		}
	}
	tests := []struct{ spelling, want string }{
		{"private", "COLLECTIVES_PRIVATE_MEMORY"},
		{"collectives_private_memory", "COLLECTIVES_PRIVATE_MEMORY"},
		{"dot", "LIBRARY_FUSION_TYPE_DOT"}, // shorter than LIBRARY_FUSION_TYPE_INDIVIDUAL_DOT
		{"memory", ""},                     // two names of the same length
		{"all", ""},
	}
	protos := []string{"COLLECTIVES_PRIVATE_MEMORY", "COLLECTIVES_SHARING_MEMORY", "LIBRARY_FUSION_TYPE_DOT", "LIBRARY_FUSION_TYPE_INDIVIDUAL_DOT"}
	for _, tt := range tests {
		if got := protoOf(tt.spelling, protos); got != tt.want {
			t.Errorf("protoOf(%q) = %q, want %q", tt.spelling, got, tt.want)
		}
	}
}

// TestFlagEnums reads a descriptor written by hand, amid other bytes as in a plugin.
func TestFlagEnums(t *testing.T) {
	key := func(num, typ int) []byte { return []byte{byte(num<<3 | typ)} }
	bytesField := func(num int, parts ...[]byte) []byte {
		payload := slices.Concat(parts...)
		length := []byte{byte(len(payload))}
		if len(payload) >= 0x80 {
			length = []byte{byte(len(payload)&0x7f | 0x80), byte(len(payload) >> 7)}
		}
		return slices.Concat(key(num, wireBytes), length, payload)
	}
	str := func(num int, s string) []byte { return bytesField(num, []byte(s)) }
	field := func(name string, typ byte, typeName string) []byte {
		return bytesField(2, str(1, name), key(5, wireVarint), []byte{typ}, str(6, typeName))
	}
	mode := bytesField(4, str(1, "Mode"), bytesField(2, str(1, "MODE_A")), bytesField(2, str(1, "MODE_B")))
	filter := bytesField(3, str(1, "Filter"), field("collective", typeEnum, ".xla.DebugOptions.Mode"))
	debugOptions := bytesField(4, str(1, "DebugOptions"),
		field("xla_mode", typeEnum, ".xla.DebugOptions.Mode"),
		field("xla_filter", typeMessage, ".xla.DebugOptions.Filter"),
		field("xla_bool", 8, ""), filter, mode)
	file := slices.Concat(str(1, "xla/xla.proto"), str(2, "xla"), debugOptions)
	plugin := slices.Concat([]byte("\x7fELF and code"), file, []byte{0xff, 0xff, 0x00, '\n', 3, 'x'})
	got := flagEnums(plugin)
	if len(got) != 2 || strings.Join(got["xla_mode"], " ") != "MODE_A MODE_B" || strings.Join(got["xla_filter"], " ") != "MODE_A MODE_B" {
		t.Errorf("flagEnums = %v", got)
	}
}
