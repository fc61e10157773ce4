package remat_test

import (
	"strings"
	"testing"

	"github.com/onegpu/onegpu/remat"
)

func TestPolicies(t *testing.T) {
	values := []remat.Tag{
		{Name: "attn_out"},
		{Name: "mlp_in", Dot: true},
		{Name: "attn_scores", Dot: true, BatchDims: true},
		{Dot: true},
		{Dot: true, BatchDims: true},
	}
	for _, c := range []struct {
		policy remat.Policy
		saves  []bool // for each of values
	}{
		{remat.Policy{}, []bool{false, false, false, false, false}},
		{remat.NothingSaveable, []bool{false, false, false, false, false}},
		{remat.EverythingSaveable, []bool{true, true, true, true, true}},
		{remat.DotsSaveable, []bool{false, true, true, true, true}},
		{remat.DotsWithNoBatchDimsSaveable, []bool{false, true, false, true, false}},
		{remat.SaveOnlyTheseNames("attn_out", "attn_scores"), []bool{true, false, true, false, false}},
		{remat.SaveAnyNamesButThese("attn_out"), []bool{false, true, true, false, false}},
		{remat.SaveFromBoth(remat.DotsWithNoBatchDimsSaveable, remat.SaveOnlyTheseNames("attn_out")), []bool{true, true, false, true, false}},
	} {
		t.Run(c.policy.String(), func(t *testing.T) {
			for i, v := range values {
				if got := c.policy.Saves(v); got != c.saves[i] {
					t.Errorf("Saves(%+v) = %v, want %v", v, got, c.saves[i])
				}
			}
			parsed, err := remat.ParsePolicy(c.policy.String())
			if err != nil {
				t.Fatalf("ParsePolicy(String()) failed: %v", err)
			}
			if parsed.String() != c.policy.String() || parsed.SavesEverything() != c.policy.SavesEverything() {
				t.Errorf("ParsePolicy(%q) = %q", c.policy, parsed)
			}
			for i, v := range values {
				if parsed.Saves(v) != c.saves[i] {
					t.Errorf("parsed policy: Saves(%+v) = %v, want %v", v, parsed.Saves(v), c.saves[i])
				}
			}
		})
	}
}

func TestParsePolicy(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"dots_saveable", "dots_saveable"},
		{"checkpoint_dots", "dots_saveable"},
		{"checkpoint_dots_with_no_batch_dims", "dots_with_no_batch_dims_saveable"},
		{" save_only_these_names: a, b ", "save_only_these_names:a,b"},
		{"dots_with_no_batch_dims_saveable+save_only_these_names:attn_out", "dots_with_no_batch_dims_saveable+save_only_these_names:attn_out"},
	} {
		p, err := remat.ParsePolicy(c.in)
		if err != nil || p.String() != c.want {
			t.Errorf("ParsePolicy(%q) = %q, %v; want %q", c.in, p, err, c.want)
		}
	}
	for _, c := range []struct{ in, mentions string }{
		{"", "nothing_saveable"},
		{"dots", `unknown policy "dots"`},
		{"dots_saveable+nope", `"nope"`},
		{"save_only_these_names", "needs names"},
		{"save_only_these_names:", "needs names"},
		{"dots_saveable:a", "takes no names"},
	} {
		_, err := remat.ParsePolicy(c.in)
		if err == nil || !strings.Contains(err.Error(), c.mentions) {
			t.Errorf("ParsePolicy(%q): error %v, want one mentioning %s", c.in, err, c.mentions)
		}
	}
	if _, err := remat.ParsePolicy("bogus"); err == nil || !strings.Contains(err.Error(), "dots_with_no_batch_dims_saveable") {
		t.Errorf("the error for an unknown policy does not list the policies: %v", err)
	}
}
