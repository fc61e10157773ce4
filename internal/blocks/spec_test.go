package blocks_test

import (
	"strings"
	"testing"

	"github.com/onegpu/onegpu/internal/blocks"
)

func TestParseSpec(t *testing.T) {
	for _, c := range []struct {
		in   string
		want blocks.Spec
		str  string
	}{
		{"none", blocks.Spec{}, "none"},
		{"", blocks.Spec{}, "none"},
		{"mlp", blocks.Spec{MLP: true}, "mlp"},
		{"attn", blocks.Spec{Attention: true}, "attn"},
		{"attention", blocks.Spec{Attention: true}, "attn"},
		{"mlp,attn", blocks.Spec{MLP: true, Attention: true}, "mlp,attn"},
		{"attn, mlp", blocks.Spec{MLP: true, Attention: true}, "mlp,attn"},
		{"block", blocks.Spec{Block: true}, "block"},
	} {
		got, err := blocks.ParseSpec(c.in)
		if err != nil || got != c.want || got.String() != c.str {
			t.Errorf("ParseSpec(%q) = %+v (%q), %v; want %+v (%q)", c.in, got, got, err, c.want, c.str)
		}
	}
	for _, c := range []struct{ in, mentions string }{
		{"mlp,atn", `unknown part "atn"`},
		{"ffn", "none, mlp, attn, block"},
		{"none,mlp", `"none" cannot be combined`},
		{"block,mlp", `"block" already checkpoints`},
	} {
		_, err := blocks.ParseSpec(c.in)
		if err == nil || !strings.Contains(err.Error(), c.mentions) {
			t.Errorf("ParseSpec(%q): error %v, want one mentioning %s", c.in, err, c.mentions)
		}
	}
}
