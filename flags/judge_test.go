//go:build cgo

package flags

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/onegpu/onegpu/flags/internal/pjrtprobe"
)

// TestMain lets the test binary be the judge's child process: with pjrtprobe.ChildEnv set, it
// only creates a PJRT client, which makes XLA parse XLA_FLAGS, and exits (see TestPluginJudge).
func TestMain(m *testing.M) {
	pjrtprobe.RunChildIfAsked()
	os.Exit(m.Run())
}

// TestPluginJudge holds Set.Check to what the real plugin named by ONEGPU_PJRT_PLUGIN does: for
// every XLA_FLAGS text of judgeCases, freeTextCases and generatedCases, a child process sets it,
// creates a client and compiles and runs a small program (XLA reads some flags only when it
// compiles). A text Check accepts must let the child do all of that; a text Check rejects must
// end the child (and, for one setting, for the reason Check gives: an unknown flag, a value XLA
// cannot read, or an option LLVM does not know). Every verdict is enforced, those on the values of enums, lists and the other
// flags XLA parses with setters of their own included. Texts Check accepts are probed in batches,
// split in halves when a batch fails; rejected ones one per child.
//
// Check may refuse values the plugin would take (it accepts only what flags/tables shows the build
// takes: empty list items, signed range bounds, spellings no probe tried); the texts judged are
// chosen so that such conservative refusals are not among them.
func TestPluginJudge(t *testing.T) {
	plugin := os.Getenv(PluginEnv)
	if plugin == "" {
		t.Skipf("%s is not set: set it to the absolute path of a CPU plugin (CI: lammps-jax-pjrt-cpu 0.11.2's "+
			"pjrt_c_api_cpu_plugin.so) to judge Check's verdicts by the real plugin", PluginEnv)
	}
	if strings.ContainsRune(plugin, '/') && !filepath.IsAbs(plugin) {
		t.Fatalf("%s=%q: give the plugin's absolute path", PluginEnv, plugin)
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	j := &judge{t: t, prober: pjrtprobe.Prober{Plugin: plugin, Command: []string{self, "-test.run=^$"}, Dir: t.TempDir(), Compile: true}}
	start := time.Now()
	base := j.probe("")
	if base.Outcome != pjrtprobe.Accepted {
		t.Fatalf("plugin %s creates no client with an empty XLA_FLAGS: %s", plugin, base.Summary())
	}
	b, err := BuildForPlugin(base.Platform, base.Major, base.Minor)
	if err != nil {
		t.Skipf("plugin %s is of no build onegpu has a table for: %v", plugin, err)
	}
	if !b.CPU() {
		t.Skipf("plugin %s is %s: the judge creates hundreds of clients, so it runs on CPU plugins only", plugin, b)
	}

	var accepted, rejected []judgeCase
	for _, c := range slices.Concat(judgeCases(b), freeTextCases(b), generatedCases(b, 200)) {
		set, _ := Parse(c.text) // Check reports Parse's problems too
		warnings, err := set.Check(b)
		var ps Problems
		switch {
		case err == nil:
			c.warnings = warnings
			accepted = append(accepted, c)
		case errors.As(err, &ps):
			c.problems = ps
			rejected = append(rejected, c)
		default:
			t.Fatalf("%s: Check: %v", c.text, err)
		}
	}
	if len(accepted) < 500 || len(rejected) < 200 {
		t.Fatalf("only %d accepted and %d rejected texts to judge on %s", len(accepted), len(rejected), b)
	}

	// Rejected texts one per child; accepted ones in batches of at most 120 settings.
	var jobs []func()
	for _, c := range rejected {
		jobs = append(jobs, func() { j.rejected(c) })
	}
	for batch := range slices.Chunk(accepted, 120) {
		jobs = append(jobs, func() { j.accepted(batch) })
	}
	parallelDo(max(2, min(8, runtime.NumCPU())), jobs)

	t.Logf("%s (%s): judged %d texts Check accepts and %d it rejects in %d child processes, %v",
		b, plugin, len(accepted), len(rejected), j.children.Load(), time.Since(start).Round(time.Millisecond))
}

// judgeCase is one XLA_FLAGS text to judge, with what it is for and Check's verdict.
type judgeCase struct {
	text, about string
	warnings    []Problem // Check's warnings, when it accepts the text
	problems    Problems  // Check's problems, when it rejects the text
}

// judgeCases returns the texts to judge on build b:
//   - every bool, int and float flag of b with values Check accepts (true, false, 1, 0, TRUE,
//     False and the bare name; 7, +7, 007 and the default; 1.5, -2, .5, 5., 1E-3, inf, nan and
//     the default) and with one value it rejects (for bools "yes", "" or "2"; for ints "1.5", ""
//     or "7abc", and one past the range of its width; for floats "1.5f", "", "abc" or "1,5");
//   - the ends of every numeric flag's range (flags/tables/ranges.tsv), and the value below it
//     where the range starts above the type's least (XLA fails there; above a range it may only
//     be slow, so the value above is not judged);
//   - every flag whose default is a value, set to it (Check rejects the defaults the build refuses
//     written out, Flag.DefaultRefused);
//   - the values of every flag with a Form (valueCases);
//   - range edges and blanks inside quotes on one int32, int64 and float flag;
//   - the 2024 tutorial's five flags, one by one and together;
//   - names b does not know: made up, a typo, flags of other builds, a bare int flag, one dash;
//   - every preset as Resolve gives it for b.
func judgeCases(b Build) []judgeCase {
	var cs []judgeCase
	add := func(about string, texts ...string) {
		for _, text := range texts {
			cs = append(cs, judgeCase{text: text, about: about})
		}
	}
	set := func(name string, values ...string) []string {
		out := make([]string, len(values))
		for i, v := range values {
			out[i] = "--" + name + "=" + v
		}
		return out
	}
	var int32Flag, int64Flag, floatFlag string
	for i, f := range b.Flags() {
		about := f.Type() + " flag " + f.Name
		switch f.Kind {
		case KindBool:
			add(about, set(f.Name, "true", "false", "1", "0", "TRUE", "False")...)
			add(about, "--"+f.Name)
			add(about, set(f.Name, []string{"yes", "", "2"}[i%3])...)
		case KindInt:
			add(about, set(f.Name, "7", "+7", "007")...)
			add(about, set(f.Name, []string{"1.5", "", "7abc"}[i%3])...)
			if f.Bits == 64 {
				add(about, set(f.Name, "9223372036854775808")...)
				int64Flag = f.Name
			} else {
				add(about, set(f.Name, "2147483648")...)
				int32Flag = f.Name
			}
		case KindFloat:
			add(about, set(f.Name, "1.5", "-2", ".5", "5.", "1E-3", "inf", "nan")...)
			add(about, set(f.Name, []string{"1.5f", "", "abc", "1,5"}[i%4])...)
			floatFlag = f.Name
		}
		cs = append(cs, valueCases(f)...)
		if f.Ranged { // the range's ends run; below it, where XLA fails, the child must fail
			add("the range of "+about, set(f.Name, fmt.Sprint(f.Min), fmt.Sprint(f.Max))...)
			if f.Min > -(1 << (f.Bits - 1)) {
				add("below the range of "+about, set(f.Name, fmt.Sprint(f.Min-1))...)
			}
		}
		if f.DefaultComputed == "" && !f.NoOp && f.Form != FormUnknown {
			add("the default of "+about, newSetting(f.Name, f.Default, "", "").String())
		}
		if f.Form == FormEnum || f.Form == FormNames {
			for _, v := range foreignValues(f, b) {
				add("another build's spelling for "+about, newSetting(f.Name, v, "", "").String())
			}
		}
	}
	if int32Flag != "" {
		add("int32 range", set(int32Flag, "2147483647", "-2147483648", "-2147483649", "0x10", "' 7'")...)
	}
	if int64Flag != "" {
		add("int64 range", set(int64Flag, "9223372036854775807", "-9223372036854775808", "-9223372036854775809")...)
	}
	if floatFlag != "" {
		add("float forms", set(floatFlag, "3.4e38", "-1e-45", "' 1.5'", "1e", "e5", "--1")...)
	}

	tutorial, _ := Parse(Tutorial2024)
	for _, st := range tutorial.Settings() {
		add("the 2024 tutorial's flag", st.String())
	}
	add("the 2024 tutorial's flags together", Tutorial2024)

	add("a made-up flag", "--xla_onegpu_no_such_flag=1", "--xla_onegpu_no_such_flag")
	add("a typo", "--xla_dump_too=/tmp/x")
	for _, other := range Builds() {
		for _, f := range other.Flags() {
			if _, ok := b.Lookup(f.Name); !ok {
				add("a flag of "+string(other)+" only", "--"+f.Name+"="+sampleValue(f))
				break
			}
		}
	}
	for _, f := range b.Flags() {
		if f.Kind == KindInt {
			add("a bare int flag", "--"+f.Name)
			add("one dash", "-"+f.Name+"=1")
			break
		}
	}
	add("no name", "--=1")

	for _, spec := range []string{"single-gpu-training", "memory=90", "no-auto-remat", "no-command-buffers",
		"fast-compile", "autotune-cache=/tmp/onegpu-judge-cache", "dump=/tmp/onegpu-judge-dump,jit_.*,after.*",
		"deterministic", "legacy-2024"} {
		p, err := ParsePreset(spec)
		if err != nil {
			panic(err)
		}
		if s, _, err := Resolve(b, Set{}, p); err == nil && s.Len() > 0 {
			add("preset "+spec, s.String())
		}
	}
	return cs
}

// valueCases returns texts for the values of f, by its Form: every value the build takes, in
// the cases it takes them, and values its setter refuses. It leaves out what Check refuses only
// to be safe (see TestPluginJudge), and FormUnknown flags, of which Check accepts nothing.
func valueCases(f Flag) []judgeCase {
	var cs []judgeCase
	add := func(about string, values ...string) {
		for _, v := range values {
			cs = append(cs, judgeCase{text: newSetting(f.Name, v, "", "").String(), about: about + " of " + f.Form.String() + " flag " + f.Name})
		}
	}
	empty := "the empty value"
	if f.AcceptsEmpty {
		empty += ", which it takes"
	}
	switch f.Form {
	case FormEnum:
		add("a value", f.Values...)
		for _, v := range f.Values {
			add("a value in other case", swapCase(v))
		}
		add(empty, "")
	case FormNames:
		add("an item", f.Values...)
		add("every item at once", strings.Join(f.Values, ","))
		add("items in other case", swapCase(strings.Join(f.Values, ",")))
		add(empty, "")
		v0, v1 := f.Values[0], f.Values[len(f.Values)-1]
		if f.AcceptsEdits {
			add("edits", "+"+v0+",-"+v1, "-"+v0)
			add("edits mixed with items", v0+",+"+v1, "-"+v0+","+v1)
		} else {
			add("an edit", "+"+v0)
		}
	case FormPairs:
		add("PASS=N pairs", "algsimp=3", "algsimp=3,dce=-1,cse=+2", "algsimp=007")
		add("not PASS=N pairs", "algsimp", "algsimp=1.5", "algsimp=1,", "algsimp=x")
		add(empty, "")
	case FormRanges:
		add("ranges", "1", "0:0", "1:2,5:7", "3:", ":4", "1,3:5,7:,:9", "9223372036854775807")
		add("not ranges", "2:1", "1:2:3", "a", "1,", ":", "99999999999999999999")
		add(empty, "")
	case FormDuration:
		add("a duration", "30s", "1h30m", "1.5ms", ".5s", "1.s", "0", "inf", "-inf", "+1s", "10us", "5ns", "999999999999999h")
		add("not a duration", "30", "1d", "INF", "1S", "abc", "1 s")
		add(empty, "")
	}
	return cs
}

// foreignValues returns the spellings the other builds give for flag f of build b (their values
// and their defaults, xla.proto names for most) that b's values do not list: Check rejects them on
// b unless b takes them in any case, and the plugin must agree.
func foreignValues(f Flag, b Build) []string {
	var out []string
	for _, other := range Builds() {
		g, ok := other.Lookup(f.Name)
		if !ok || other == b {
			continue
		}
		values := g.Values
		if g.DefaultComputed == "" && g.Default != "" {
			values = append(values, g.Default)
		}
		for _, v := range values {
			if !slices.Contains(f.Values, v) && !slices.Contains(out, v) {
				out = append(out, v)
			}
		}
	}
	return out
}

// swapCase returns s with upper and lower case letters swapped: "Default" is "dEFAULT".
func swapCase(s string) string {
	return strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z':
			return r - 'a' + 'A'
		case r >= 'A' && r <= 'Z':
			return r - 'A' + 'a'
		}
		return r
	}, s)
}

// freeTextCases returns one setting per string, list and enum flag of b, with a text no setter
// of XLA's own takes: Check must accept it for the flags that take any text and reject it for the
// others, and the plugin must agree.
func freeTextCases(b Build) []judgeCase {
	var cs []judgeCase
	for _, f := range b.Flags() {
		if f.Form == FormUnknown {
			continue
		}
		if f.Kind == KindString || f.Kind == KindList || f.Kind == KindEnum {
			cs = append(cs, judgeCase{text: "--" + f.Name + "=onegpu-judge-text", about: "any text for " + f.Type() + " flag " + f.Name})
		}
		if f.Kind == KindList && f.Form == FormAny {
			cs = append(cs, judgeCase{text: "--" + f.Name + "=a=b,c,(d):1", about: "any text for list flag " + f.Name})
		}
	}
	return cs
}

// generatedCases returns n texts of one to four settings each, drawn with a fixed seed from the
// values judgeCases and valueCases try (whose verdicts are exact, not conservative) and from
// items of xla_backend_extra_options, whose keys XLA hands to LLVM at compile time unless they
// start with xla_. Settings that Check accepts one by one may still clash when set together;
// the plugin has the last word on each text.
func generatedCases(b Build, n int) []judgeCase {
	rng := rand.New(rand.NewPCG(18, 2026))
	var pools [][]string // per flag: setting texts
	for i, f := range b.Flags() {
		if f.Form == FormUnknown {
			continue
		}
		set := func(values ...string) []string {
			out := make([]string, len(values))
			for i, v := range values {
				out[i] = "--" + f.Name + "=" + v
			}
			return out
		}
		var pool []string
		switch {
		case f.Name == backendExtraOptions:
			pool = set("xla_onegpu_a=1", "xla_onegpu_a,xla_onegpu_b=x=y", "bogus", "-bogus", "xla_onegpu_a,bogus=1", "", "xla_onegpu_a,", "=1")
		case f.Kind == KindBool:
			pool = append(set("true", "false", "1", "0", "TRUE", "False", []string{"yes", "", "2"}[i%3]), "--"+f.Name)
		case f.Kind == KindInt && f.Bits == 64:
			pool = set("7", "+7", "007", "1.5", "", "7abc", "9223372036854775808")
		case f.Kind == KindInt:
			pool = set("7", "+7", "007", "1.5", "", "7abc", "2147483648")
		case f.Kind == KindFloat:
			pool = set("1.5", "-2", ".5", "1E-3", "inf", "nan", "1.5f", "", "abc")
		case f.Kind == KindString:
			pool = set("onegpu-judge-text")
		}
		for _, c := range valueCases(f) {
			pool = append(pool, c.text)
		}
		if len(pool) > 0 {
			pools = append(pools, pool)
		}
		if f.Name == backendExtraOptions { // drawn often: a fifth of the settings
			for range len(b.Flags()) / 4 {
				pools = append(pools, pool)
			}
		}
	}
	cs := make([]judgeCase, n)
	for i := range cs {
		settings := make([]string, 1+rng.IntN(4))
		for j := range settings {
			pool := pools[rng.IntN(len(pools))]
			settings[j] = pool[rng.IntN(len(pool))]
		}
		cs[i] = judgeCase{text: strings.Join(settings, " "), about: fmt.Sprintf("generated text %d", i)}
	}
	return cs
}

// judge runs the probes of TestPluginJudge.
type judge struct {
	t        *testing.T
	prober   pjrtprobe.Prober
	children atomic.Int64
}

// probe runs one child. A child that cannot be started fails the test and reads as Failed.
func (j *judge) probe(text string) pjrtprobe.Result {
	j.children.Add(1)
	r, err := j.prober.Probe(context.Background(), text)
	if err != nil {
		j.t.Error(err) // not Fatal: probe runs on the judge's goroutines too
		return pjrtprobe.Result{Outcome: pjrtprobe.Failed, Stderr: err.Error()}
	}
	return r
}

// rejected checks that a text Check rejects ends the child, for Check's reason.
func (j *judge) rejected(c judgeCase) {
	r := j.probe(c.text)
	if r.Outcome == pjrtprobe.Accepted {
		j.t.Errorf("%s (%s): Check rejects it, the plugin accepts it; Check says: %v", c.text, c.about, c.problems)
		return
	}
	if len(c.problems) != 1 {
		return
	}
	var want pjrtprobe.Outcome
	switch msg := c.problems[0].Message; {
	case strings.Contains(msg, abortUnknown):
		want = pjrtprobe.UnknownFlag
	case strings.Contains(msg, "Couldn't interpret value"), strings.Contains(msg, "out of the int"), strings.Contains(msg, "Flag parsing failed"):
		want = pjrtprobe.BadValue
	case strings.Contains(msg, "LLVM's option parser"):
		want = pjrtprobe.UnknownLLVMOption
	}
	if want != 0 && r.Outcome != want {
		j.t.Errorf("%s (%s): Check says %q; the plugin refuses it with %s (%s)", c.text, c.about, c.problems[0].Message, r.Outcome, r.Summary())
	}
}

// accepted checks that the child creates its client with every text of cases set at once,
// splitting the batch in halves when it does not, down to the texts that fail alone.
func (j *judge) accepted(cases []judgeCase) {
	texts := make([]string, len(cases))
	for i, c := range cases {
		texts[i] = c.text
	}
	r := j.probe(strings.Join(texts, " "))
	switch {
	case r.Outcome == pjrtprobe.Accepted:
	case len(cases) == 1:
		j.t.Errorf("%s (%s): Check accepts it (warnings: %v), the plugin refuses it: %s (%s)",
			cases[0].text, cases[0].about, cases[0].warnings, r.Outcome, r.Summary())
	default:
		j.accepted(cases[:len(cases)/2])
		j.accepted(cases[len(cases)/2:])
	}
}

// parallelDo runs jobs on at most workers goroutines.
func parallelDo(workers int, jobs []func()) {
	next := make(chan func())
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for job := range next {
				job()
			}
		}()
	}
	for _, job := range jobs {
		next <- job
	}
	close(next)
	wg.Wait()
}
