package tablegen

import (
	"strings"
	"testing"
	"testing/fstest"
)

func TestNormalizeDefault(t *testing.T) {
	tests := []struct {
		kind, raw, def, computed string
	}{
		{"bool", "", "false", ""},
		{"bool", "true", "true", ""},
		{"bool", "IsSupported()", "", "IsSupported()"},
		{"int32", "", "0", ""},
		{"int32", "-1", "-1", ""},
		{"int32", "30 * 60", "1800", ""},
		{"int64", "8 * 1024 * 1024", "8388608", ""},
		{"int64", "1LL << 12", "4096", ""},
		{"int64", "std::numeric_limits<int64_t>::max()", "9223372036854775807", ""},
		{"int64", "kDefaultAllReduceCombineThreshold", "", "kDefaultAllReduceCombineThreshold"},
		{"float", "0.1f", "0.1", ""},
		{"float", "1.1", "1.1", ""},
		{"string", "", "", ""},
		{"string", `""`, "", ""},
		{"string", `"./cuda_sdk_lib"`, "./cuda_sdk_lib", ""},
		{"string", "DefaultMaxIsa()", "", "DefaultMaxIsa()"},
		{"enum", "DebugOptions::RUNTIME", "RUNTIME", ""},
		{"enum", "", "", "set by XLA's own setter"},
		{"list-edit", "FUSION,CUBLAS", "FUSION,CUBLAS", ""},
	}
	for _, tt := range tests {
		def, computed, err := normalizeDefault(tt.kind, tt.raw)
		if err != nil || def != tt.def || computed != tt.computed {
			t.Errorf("normalizeDefault(%s, %q) = %q, %q, %v; want %q, %q", tt.kind, tt.raw, def, computed, err, tt.def, tt.computed)
		}
	}
	if _, _, err := normalizeDefault("int32", "1LL << 40"); err == nil {
		t.Error("an int32 default that overflows was accepted")
	}
}

func tables(files map[string]string) fstest.MapFS {
	fsys := fstest.MapFS{}
	for name, data := range files {
		fsys[name] = &fstest.MapFile{Data: []byte(data)}
	}
	return fsys
}

func TestGenerate(t *testing.T) {
	base := map[string]string{
		BuildsFile: "# comment\nold\told.tsv\tcuda\t-\tan old build\nnew\tnew.tsv\tcpu\t0.83\ta new build\n",
		CustomFile: "xla_mode\tenum\tA,B\t\t\nxla_list\tlist-edit\t\t\t\nxla_fuel\tlist\t\t\t\nxla_text\tlist-append\t\t\t\nxla_odd\tenum\t\t\t\n",
		"old.tsv":  "xla_b\tbool\t\t\nxla_mode\tcustom\tDebugOptions::A\t\nxla_list\tcustom\tA,B\t\nxla_odd\tcustom\tDebugOptions::X\t\n",
		"new.tsv": "xla_a\tint32\t4\t\nxla_gone\tNOOP(deprecated)\t\tDEPRECATED\nxla_mode\tcustom\tDebugOptions::A\t\n" +
			"xla_fuel\tcustom\t\t\nxla_text\tcustom\t\t\nxla_list\tcustom\tA\t\n",
		ValuesFile: "# build(s)\tflag\tform\tvalues\tevidence\nold\txla_mode\tenum\tA,B\tproto names\n" +
			"old,new\txla_list\tnames empty edits fold\tA,B\tthe setter\nnew\txla_fuel\tpairs\t\tthe setter\n",
		"values_new.tsv": "new\txla_mode\tenum fold\ta=A,b=B\tprobed\nnew\txla_text\tany\t\tprobed\n",
		RangesFile:       "# build(s)\tflag\tmin\tmax\toutside\tevidence\nnew\txla_a\t1\t64\tit hangs\tprobed\n",
	}
	src, err := Generate(tables(base))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		`{build: "old", platform: "cuda", pjrtMajor: -1, pjrtMinor: -1, description: "an old build"`,
		`{Name: "xla_b", Kind: KindBool, Default: "false"}`,
		`{Name: "xla_mode", Kind: KindEnum, Default: "A", Form: FormEnum, Values: []string{"A", "B"}}`,
		`{Name: "xla_list", Kind: KindList, Default: "A,B", Edits: true, Form: FormNames, Values: []string{"A", "B"}, FoldCase: true, AcceptsEmpty: true, AcceptsEdits: true}`,
		`{Name: "xla_odd", Kind: KindEnum, Default: "X", Form: FormUnknown}`, // no rule: no value is known
		`pjrtMajor: 0, pjrtMinor: 83`,
		`{Name: "xla_a", Kind: KindInt, Bits: 32, Default: "4", Ranged: true, Min: 1, Max: 64, OutOfRange: "it hangs"}`,
		`{Name: "xla_gone", Kind: KindBool, Default: "false", Deprecated: true, NoOp: true}`,
		`{Name: "xla_mode", Kind: KindEnum, Default: "a", Form: FormEnum, Values: []string{"a", "b"}, FoldCase: true}`, // the default as the build spells A
		`{Name: "xla_fuel", Kind: KindList, Form: FormPairs}`,
		`{Name: "xla_text", Kind: KindList, Appends: true}`, // any text: FormAny, the zero Form
	} {
		if !strings.Contains(string(src), want) {
			t.Errorf("generated source lacks %s:\n%s", want, src)
		}
	}

	broken := []struct {
		name, file, data, inErr string
	}{
		{"unclassified custom flag", "new.tsv", "xla_x\tcustom\t\t\n", "classify it in custom.tsv"},
		{"unused custom entry", CustomFile, base[CustomFile] + "xla_unused\tbool\t\t\t\n", "in no flag table"},
		{"unknown type", "new.tsv", "xla_x\tdouble\t\t\n", "unknown type"},
		{"duplicate flag", "new.tsv", "xla_x\tbool\t\t\nxla_x\tbool\t\t\n", "listed twice"},
		{"short row", "new.tsv", "xla_x\tbool\n", "want 4"},
		{"a rule for a build without the flag", ValuesFile, "old\txla_fuel\tpairs\t\tthe setter\n", "not a flag of build old"},
		{"a rule for an unknown build", ValuesFile, "older\txla_mode\tenum\tA\tx\n", `unknown build "older"`},
		{"two rules for one build", "values_new.tsv", "new\txla_list\tnames\tA\tprobed\n", "two rules for build new"},
		{"a rule without evidence", ValuesFile, "old\txla_mode\tenum\tA\t \n", "no evidence"},
		{"a rule for a flag parsed by its type", ValuesFile, "old\txla_b\tenum\tA\tx\n", "parses by its type"},
		{"names for an enum", ValuesFile, "old\txla_mode\tnames\tA\tx\n", "form names for a enum flag"},
		{"an unknown form", ValuesFile, "old\txla_mode\tsome\tA\tx\n", `unknown form "some"`},
		{"edits for an enum", ValuesFile, "old\txla_mode\tenum edits\tA\tx\n", `modifier "edits"`},
		{"an enum without values", ValuesFile, "old\txla_mode\tenum\t\tx\n", "needs values"},
		{"values for pairs", ValuesFile, "new\txla_fuel\tpairs\tA\tx\n", "takes no values"},
		{"a signed value", ValuesFile, "old\txla_mode\tenum\t+A\tx\n", "not a value"},
		{"a value twice", ValuesFile, "old\txla_mode\tenum fold\tA,a\tx\n", "listed twice"},
		{"bad PJRT version", BuildsFile, "old\told.tsv\tcuda\tv1\tx\n", "not major.minor"},
		{"a range for a build without the flag", RangesFile, "old\txla_a\t1\t2\tx\ty\n", "not a flag of build old"},
		{"a range for a bool flag", RangesFile, "old\txla_b\t0\t1\tx\ty\n", "ranges are for int flags"},
		{"a range past int32", RangesFile, "new\txla_a\t1\t4294967296\tx\ty\n", "past int32"},
		{"an empty range", RangesFile, "new\txla_a\t5\t4\tx\ty\n", "is empty"},
		{"a range without the default", RangesFile, "new\txla_a\t5\t9\tx\ty\n", "default 4 is outside"},
		{"a range that is not numbers", RangesFile, "new\txla_a\t1\tmany\tx\ty\n", "not two integers"},
		{"a range without evidence", RangesFile, "new\txla_a\t1\t9\tx\t\n", "no evidence"},
		{"a range without its consequence", RangesFile, "new\txla_a\t1\t9\t\ty\n", "say what XLA does"},
		{"two ranges", RangesFile, "new\txla_a\t1\t9\tx\ty\nnew\txla_a\t1\t8\tx\ty\n", "two ranges"},
	}
	for _, tt := range broken {
		files := map[string]string{}
		for k, v := range base {
			files[k] = v
		}
		files[tt.file] = tt.data
		if _, err := Generate(tables(files)); err == nil || !strings.Contains(err.Error(), tt.inErr) {
			t.Errorf("%s: Generate = %v, want an error with %q", tt.name, err, tt.inErr)
		}
	}
}
