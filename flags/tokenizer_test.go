package flags

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestTokenize covers each rule of XLA's ParseArgvFromString, one or more cases per rule.
func TestTokenize(t *testing.T) {
	tests := []struct {
		rule, text   string
		args         []string // the arguments XLA's flag matcher would see
		rest         string   // the text XLA ignores
		unterminated bool     // the last token's quote is never closed
	}{
		{rule: "empty text holds no flags", text: "", args: nil},
		{rule: "only blanks hold no flags", text: " \t\r\n", args: nil},
		{rule: "blanks separate flags", text: "--a=1 --b=2\t--c=3\n--d=4\r--e", args: []string{"--a=1", "--b=2", "--c=3", "--d=4", "--e"}},
		{rule: "leading and trailing blanks are skipped", text: "  --a=1  ", args: []string{"--a=1"}},
		{rule: "vertical tab and form feed are not blanks", text: "--a=1\v--b=2\f", args: []string{"--a=1\v--b=2\f"}},
		{rule: "a bare flag is one token", text: "--xla_flag", args: []string{"--xla_flag"}},
		{rule: "parsing stops at a token not starting with '-'", text: "--a=1 b --c=3", args: []string{"--a=1"}, rest: "b --c=3"},
		{rule: "a value after a blank stops parsing", text: "--xla_gpu_autotune_level 0 --xla_x=1", args: []string{"--xla_gpu_autotune_level"}, rest: "0 --xla_x=1"},
		{rule: "text not starting with '-' holds no flags", text: "flags.txt", rest: "flags.txt"},
		{rule: "a single dash starts a token", text: "-x -", args: []string{"-x", "-"}},
		{rule: "a negative number after a blank is a token", text: "--a -1", args: []string{"--a", "-1"}},
		{rule: "-- is a token", text: "--a=1 -- --b=2", args: []string{"--a=1", "--", "--b=2"}},
		{rule: "single quotes keep blanks", text: "--d='/tmp/a b' --e=1", args: []string{"--d=/tmp/a b", "--e=1"}},
		{rule: "double quotes keep blanks", text: `--d="/tmp/a b" --e=1`, args: []string{"--d=/tmp/a b", "--e=1"}},
		{rule: "backslash escapes inside double quotes", text: `--d="a\"b\\c\d"`, args: []string{`--d=a"b\cd`}},
		{rule: "backslash is literal inside single quotes", text: `--d='a\b'`, args: []string{`--d=a\b`}},
		{rule: "the other quote is literal inside quotes", text: `--d='a"b' --e="c'd"`, args: []string{`--d=a"b`, `--e=c'd`}},
		{rule: "an empty quoted value", text: "--d='' --e=\"\"", args: []string{"--d=", "--e="}},
		{rule: "an unterminated quote takes the rest", text: "--d='a b --e=1", args: []string{"--d=a b --e=1"}, unterminated: true},
		{rule: "a trailing backslash in double quotes is literal", text: `--d="a\`, args: []string{`--d=a\`}, unterminated: true},
		{rule: "a quote must follow '=' right after the name", text: `--a.b='x y'`, args: []string{"--a.b='x"}, rest: "y'"},
		{rule: "a quote later in the value is literal", text: `--d=a'b c'`, args: []string{"--d=a'b"}, rest: "c'"},
		{rule: "text right after a closing quote starts a token", text: `--d='x'--e=1`, args: []string{"--d=x", "--e=1"}},
		{rule: "text right after a closing quote can stop parsing", text: `--d='x'y --e=1`, args: []string{"--d=x"}, rest: "y --e=1"},
		{rule: "an empty unquoted value", text: "--xla_gpu_enable_command_buffer= --b", args: []string{"--xla_gpu_enable_command_buffer=", "--b"}},
		{rule: "'=' and text after it are part of the token", text: "--a==b=c", args: []string{"--a==b=c"}},
		{rule: "non-ASCII bytes end the name but not the token", text: "--é='x y'", args: []string{"--é='x"}, rest: "y'"},
	}
	for _, tt := range tests {
		t.Run(tt.rule, func(t *testing.T) {
			args, rest := tokenize(tt.text)
			var got []string
			for _, a := range args {
				got = append(got, a.arg)
			}
			if !slices.Equal(got, tt.args) || rest != tt.rest {
				t.Errorf("tokenize(%q) = %q, rest %q; want %q, rest %q", tt.text, got, rest, tt.args, tt.rest)
			}
			if len(args) > 0 && args[len(args)-1].unterminated != tt.unterminated {
				t.Errorf("tokenize(%q): unterminated = %v, want %v", tt.text, args[len(args)-1].unterminated, tt.unterminated)
			}
		})
	}
}

// TestParseSettings checks how each argument becomes a Setting.
func TestParseSettings(t *testing.T) {
	tests := []struct {
		text                string
		name, value         string
		hasValue, malformed bool
	}{
		{text: "--xla_a=1", name: "xla_a", value: "1", hasValue: true},
		{text: "--xla_a", name: "xla_a"},
		{text: "--xla_a=", name: "xla_a", hasValue: true},
		{text: "--xla_a=b=c", name: "xla_a", value: "b=c", hasValue: true},
		{text: "--xla_dump_to='/a b'", name: "xla_dump_to", value: "/a b", hasValue: true},
		{text: "-xla_a=1", malformed: true},
		{text: "--", malformed: true},
		{text: "--=1", malformed: true},
	}
	for _, tt := range tests {
		s, err := Parse(tt.text)
		if err != nil {
			t.Fatalf("Parse(%q): %v", tt.text, err)
		}
		st := s.settings[0]
		if tt.malformed {
			if st.Name != "" {
				t.Errorf("Parse(%q).Name = %q, want none", tt.text, st.Name)
			}
			continue
		}
		if st.Name != tt.name || st.Value != tt.value || st.HasValue != tt.hasValue {
			t.Errorf("Parse(%q) = %q %q %v, want %q %q %v", tt.text, st.Name, st.Value, st.HasValue, tt.name, tt.value, tt.hasValue)
		}
	}
}

// TestParseSyntaxProblems checks the errors for text XLA would drop or misread.
func TestParseSyntaxProblems(t *testing.T) {
	tests := []struct {
		text, flag, inMessage, fix string
	}{
		{text: "--xla_gpu_autotune_level 0", flag: "xla_gpu_autotune_level", inMessage: "blank before its value", fix: "write --xla_gpu_autotune_level=0"},
		{text: "--xla_a=1 stray --xla_b=2", flag: "stray", inMessage: `stops reading flags at "stray --xla_b=2"`, fix: "start every flag with --"},
		{text: "--xla_dump_to='/tmp", flag: "xla_dump_to", inMessage: "never closed", fix: "close the quote"},
		{text: "--xla_a=\x00", flag: "NUL", inMessage: "NUL byte", fix: "remove it"},
	}
	for _, tt := range tests {
		_, err := Parse(tt.text)
		ps, ok := err.(Problems)
		if !ok || len(ps) != 1 {
			t.Fatalf("Parse(%q) error = %v, want one problem", tt.text, err)
		}
		p := ps[0]
		if p.Flag != tt.flag || !strings.Contains(p.Message, tt.inMessage) || !strings.HasPrefix(p.Fix, tt.fix) {
			t.Errorf("Parse(%q) problem = %+v, want flag %q, message with %q, fix %q", tt.text, p, tt.flag, tt.inMessage, tt.fix)
		}
	}
}

func TestParseEnv(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "flags.txt")
	if err := os.WriteFile(file, []byte("--xla_gpu_autotune_level=2\n--xla_dump_to='/tmp/a b'\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, value string
		want        string // rendered settings
		source      string
		wantErr     string
	}{
		{name: "empty holds no flags", value: "", want: ""},
		{name: "flags after blanks", value: "  --xla_gpu_autotune_level=2", want: "--xla_gpu_autotune_level=2", source: "XLA_FLAGS"},
		{name: "a file name", value: file, want: "--xla_gpu_autotune_level=2 --xla_dump_to='/tmp/a b'", source: "XLA_FLAGS file " + file},
		{name: "a missing file aborts XLA", value: filepath.Join(dir, "missing"), wantErr: "cannot open it"},
		{name: "only blanks name a file", value: "   ", wantErr: "cannot open it"},
		{name: "a folder", value: dir, wantErr: dir + " is a folder, not a regular file"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := ParseEnv(tt.value)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("ParseEnv(%q) error = %v, want one containing %q", tt.value, err, tt.wantErr)
				}
				if _, checkErr := s.Check(CUDA011); checkErr == nil {
					t.Errorf("ParseEnv(%q): Check does not repeat the error", tt.value)
				}
				return
			}
			if err != nil {
				t.Fatalf("ParseEnv(%q): %v", tt.value, err)
			}
			if got := s.String(); got != tt.want {
				t.Errorf("ParseEnv(%q) = %q, want %q", tt.value, got, tt.want)
			}
			for _, st := range s.Settings() {
				if st.Source != tt.source {
					t.Errorf("ParseEnv(%q): source %q, want %q", tt.value, st.Source, tt.source)
				}
			}
		})
	}
}

func TestEnvironment(t *testing.T) {
	t.Setenv(EnvVar, "--xla_gpu_autotune_level=1")
	s, err := Environment()
	if err != nil || s.String() != "--xla_gpu_autotune_level=1" {
		t.Errorf("Environment() = %q, %v", s, err)
	}
}
