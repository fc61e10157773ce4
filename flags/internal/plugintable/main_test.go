package main

import (
	"context"
	"io"
	"os"
	"path/filepath"
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
	o := options{plugin: filepath.Join(dir, "plugin.so"), tables: dir, extra: filepath.Join(dir, "extra.txt"),
		out: filepath.Join(dir, "derived.tsv"), workers: 3, child: []string{"sh", "-c", fakeXLA}, log: io.Discard}
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
	if err := run(o); err != nil {
		t.Fatal(err)
	}
	if again, _ := os.ReadFile(o.out); string(again) != string(got) {
		t.Error("a second run wrote another file")
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
