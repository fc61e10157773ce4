package flags

import (
	"strings"
	"testing"
)

func mustParse(t *testing.T, text string) Set {
	t.Helper()
	s, err := Parse(text)
	if err != nil {
		t.Fatalf("Parse(%q): %v", text, err)
	}
	return s
}

// TestRenderQuoting checks that each value is written so that XLA reads it back unchanged.
func TestRenderQuoting(t *testing.T) {
	tests := []struct{ value, want string }{
		{"4", "--xla_dump_to=4"},
		{"", "--xla_dump_to="},
		{"/tmp/a b", "--xla_dump_to='/tmp/a b'"},
		{"a\tb", "--xla_dump_to='a\tb'"},
		{"it's here", `--xla_dump_to="it's here"`},
		{`it's "x" \ y`, `--xla_dump_to="it's \"x\" \\ y"`},
		{"'quoted'", `--xla_dump_to="'quoted'"`},
		{`"quoted"`, `--xla_dump_to='"quoted"'`},
		{`a'b"c`, `--xla_dump_to=a'b"c`},
	}
	for _, tt := range tests {
		st := newSetting("xla_dump_to", tt.value, "", "")
		got := st.String()
		if got != tt.want {
			t.Errorf("value %q renders as %s, want %s", tt.value, got, tt.want)
		}
		back := mustParse(t, got+" --xla_next=1").settings
		if len(back) != 2 || back[0].Value != tt.value {
			t.Errorf("%s parses back as %+v, want value %q", got, back, tt.value)
		}
	}
}

// TestSettingsOverride checks which settings XLA acts on when a flag is set more than once:
// the last one for scalars, all of them for appending lists, and edits on top of a list.
func TestSettingsOverride(t *testing.T) {
	tests := []struct{ name, text, want string }{
		{"last scalar wins", "--xla_gpu_autotune_level=1 --xla_dump_to=/a --xla_gpu_autotune_level=3",
			"--xla_dump_to=/a --xla_gpu_autotune_level=3"},
		{"bare bool is overridden like any value", "--xla_gpu_deterministic_ops --xla_gpu_deterministic_ops=false",
			"--xla_gpu_deterministic_ops=false"},
		{"appending lists keep every occurrence", "--xla_disable_hlo_passes=a --xla_disable_hlo_passes=b",
			"--xla_disable_hlo_passes=a --xla_disable_hlo_passes=b"},
		{"a list edit applies on top", "--xla_gpu_enable_command_buffer=FUSION --xla_gpu_enable_command_buffer=+CUBLAS",
			"--xla_gpu_enable_command_buffer=FUSION --xla_gpu_enable_command_buffer=+CUBLAS"},
		{"a list reset replaces edits", "--xla_gpu_enable_command_buffer=+CUBLAS --xla_gpu_enable_command_buffer=",
			"--xla_gpu_enable_command_buffer="},
		{"unknown flags are all kept", "--xla_nope=1 --xla_nope=2", "--xla_nope=1 --xla_nope=2"},
		{"malformed tokens are all kept", "-x -x", "-x -x"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := mustParse(t, tt.text).String(); got != tt.want {
				t.Errorf("%s: got %s, want %s", tt.text, got, tt.want)
			}
		})
	}
}

// TestMergeUserOverridesPreset checks that the later set wins and says what it replaced.
func TestMergeUserOverridesPreset(t *testing.T) {
	preset, _, err := Memory(90).For(CUDA011)
	if err != nil {
		t.Fatal(err)
	}
	user, err := ParseEnv("--xla_gpu_memory_limit_slop_factor=80")
	if err != nil {
		t.Fatal(err)
	}
	merged := Merge(preset, user)
	settings := merged.Settings()
	if len(settings) != 1 || settings[0].Value != "80" || settings[0].Source != EnvVar {
		t.Fatalf("Merge(preset, user) = %+v, want the user's value 80", settings)
	}
	if want := "--xla_gpu_memory_limit_slop_factor=90 (preset memory=90)"; settings[0].Overrides != want {
		t.Errorf("Overrides = %q, want %q", settings[0].Overrides, want)
	}
	if st, ok := merged.Lookup("xla_gpu_memory_limit_slop_factor"); !ok || st.Value != "80" {
		t.Errorf("Lookup = %+v, %v; want the user's setting", st, ok)
	}
	if _, ok := merged.Lookup("xla_dump_to"); ok {
		t.Error("Lookup found a flag that is not set")
	}
	if merged.Len() != 1 {
		t.Errorf("Len = %d, want 1", merged.Len())
	}
}

func TestMergeKeepsSyntaxProblems(t *testing.T) {
	bad, _ := Parse("--xla_gpu_autotune_level 0")
	_, err := Merge(Set{}, bad).Check(CUDA011)
	if err == nil || !strings.Contains(err.Error(), "blank before its value") {
		t.Errorf("Check of a merged set lost the tokenizing problem: %v", err)
	}
}
