package flags

import (
	"slices"
	"testing"
)

// tokensOf returns the arguments XLA would see for s, in order, overridden ones included.
func tokensOf(s Set) []string {
	out := make([]string, len(s.settings))
	for i, st := range s.settings {
		out[i] = st.Token
	}
	return out
}

// FuzzParse checks that Parse never panics, that rendering what it parsed and parsing that
// again gives the same arguments with no tokenizing problem (nothing dropped, nothing
// misquoted), and that the effective rendering is a fixed point. Check runs too, to cover its
// paths on odd input. Seeds are below and in testdata/fuzz/FuzzParse.
func FuzzParse(f *testing.F) {
	for _, seed := range []string{
		"",
		Tutorial2024,
		"--xla_gpu_autotune_level 0 --xla_dump_to=/tmp",
		"--xla_dump_to='/tmp/a b' --xla_dump_hlo_module_re=\"jit_(a|b) x\"",
		`--d="a\"b\\c" --e='it"s' --f=it's`,
		"--d='never closed --e=1",
		"--a='x'--b=1 -- -x --=1",
		"--xla_disable_hlo_passes=a --xla_disable_hlo_passes=b --xla_gpu_enable_command_buffer=+CUBLAS",
		"\t--xla_gpu_autotune_level=1\r\n--xla_gpu_autotune_level=2\v",
		"--é='x y' --a=\x00",
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, text string) {
		first, _ := Parse(text)
		_, _ = first.Check(CUDA011)
		rendered := render(first.settings)
		second, _ := Parse(rendered)
		if got, want := tokensOf(second), tokensOf(first); !slices.Equal(got, want) {
			t.Fatalf("Parse(%q) = %q; rendered as %q it parses as %q", text, want, rendered, got)
		}
		for _, p := range second.syntax {
			if p.Flag != "NUL" {
				t.Fatalf("%q, rendered as %q, has a tokenizing problem: %v", text, rendered, p)
			}
		}
		effective := first.String()
		third, _ := Parse(effective)
		if third.String() != effective {
			t.Fatalf("the effective flags %q render as %q after parsing", effective, third.String())
		}
	})
}
