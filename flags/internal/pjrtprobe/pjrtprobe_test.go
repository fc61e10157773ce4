package pjrtprobe

import (
	"context"
	"strings"
	"testing"
)

func TestClassify(t *testing.T) {
	tests := []struct {
		code   int
		stderr string
		want   Outcome
	}{
		{0, "", Accepted},
		{1, "F0000 parse_flags_from_env.cc:234] Unknown flag in XLA_FLAGS: --xla_nope=1", UnknownFlag},
		{1, "F0000 parse_flags_from_env.cc:234] Unknown flags in XLA_FLAGS: --a --b", UnknownFlag},
		{1, "E0000 Couldn't interpret value maybe for flag xla_x.\nF0000 Check failed: ... Flag parsing failed.", BadValue},
		{1, "F0000 Check failed: ... Flag parsing failed.", BadValue},
		{3, "pjrtprobe: loading plugin: no such file", Failed},
		{-1, "", Failed},
		{1, "xla: Unknown command line argument 'bogus'.  Try: 'xla --help'", UnknownLLVMOption},
		{5, "pjrtprobe: compiling and running a program: compile: ...", Failed},
		{134, "Unknown flag", Failed}, // an abort is no verdict on flags
	}
	for _, tt := range tests {
		if got := classify(tt.code, tt.stderr); got != tt.want {
			t.Errorf("classify(%d, %q) = %v, want %v", tt.code, tt.stderr, got, tt.want)
		}
	}
}

func TestChildEnv(t *testing.T) {
	env := childEnv([]string{"PATH=/bin", "XLA_FLAGS=--old", "TF_CPP_MIN_LOG_LEVEL=3", ChildEnv + "=/old.so"}, "/p.so", "--new=1")
	if got := strings.Join(env, " "); got != "PATH=/bin XLA_FLAGS=--new=1 "+ChildEnv+"=/p.so" {
		t.Errorf("childEnv = %s", got)
	}
}

// TestProbe runs a shell that answers as a child would.
func TestProbe(t *testing.T) {
	p := Prober{Plugin: "/p.so", Command: []string{"sh", "-c", `
case "$XLA_FLAGS" in
"") echo "pjrtprobe: client platform=cpu pjrt=0.115" ;;
--bad=*) echo "E0000 x.cc:93] Couldn't interpret value x for flag bad." >&2; echo "F0000 y.cc:220] Check failed: Flag parsing failed." >&2; exit 1 ;;
--silent) exit 0 ;;
*) echo "F0000 parse_flags_from_env.cc:234] Unknown flag in XLA_FLAGS: $XLA_FLAGS" >&2; exit 1 ;;
esac`}}
	ctx := context.Background()
	r, err := p.Probe(ctx, "")
	if err != nil || r.Outcome != Accepted || r.Platform != "cpu" || r.Major != 0 || r.Minor != 115 || r.Summary() != "" {
		t.Errorf("Probe(\"\") = %+v, %v", r, err)
	}
	r, err = p.Probe(ctx, "--bad=x")
	if err != nil || r.Outcome != BadValue || r.Summary() != "Couldn't interpret value x for flag bad." {
		t.Errorf("Probe(--bad=x) = %+v (%s), %v", r, r.Summary(), err)
	}
	r, err = p.Probe(ctx, "--nope")
	if err != nil || r.Outcome != UnknownFlag || r.Summary() != "Unknown flag in XLA_FLAGS: --nope" {
		t.Errorf("Probe(--nope) = %+v (%s), %v", r, r.Summary(), err)
	}
	if r, err := p.Probe(ctx, "--silent"); err != nil || r.Outcome != Failed || !strings.Contains(r.Summary(), "RunChildIfAsked") {
		t.Errorf("Probe(--silent) = %+v, %v; want Failed: the child did not report its client", r, err)
	}
	if _, err := (Prober{Command: []string{"/no/such/program"}}).Probe(ctx, ""); err == nil {
		t.Error("Probe with a missing program: no error")
	}
}
