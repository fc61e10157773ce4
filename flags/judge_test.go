//go:build cgo

package flags

import (
	"context"
	"errors"
	"fmt"
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
// every XLA_FLAGS text of judgeCases, a child process sets it and creates a client. A text Check
// accepts must let the child create its client; a text Check rejects must end the child (and, for
// one setting, for the reason Check gives: an unknown flag, or a value XLA cannot read). Texts
// Check accepts are probed in batches, split in halves when a batch fails; rejected ones one per
// child.
//
// The verdicts on enum and list flags, which XLA parses with setters of their own, and on
// arbitrary text for string flags are reported in the log but not enforced: Check knows their
// kind, not every value their setters take (custom.tsv's enum values come from xla.proto, and
// some builds' setters take other names).
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
	j := &judge{t: t, prober: pjrtprobe.Prober{Plugin: plugin, Command: []string{self, "-test.run=^$"}}}
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
	for _, c := range append(judgeCases(b), freeTextCases(b)...) {
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
	slices.Sort(j.gaps)
	for _, gap := range j.gaps {
		t.Logf("not enforced: %s", gap)
	}
}

// judgeCase is one XLA_FLAGS text to judge, with what it is for and Check's verdict.
type judgeCase struct {
	text, about string
	logOnly     bool      // a disagreement is logged, not an error (see TestPluginJudge)
	warnings    []Problem // Check's warnings, when it accepts the text
	problems    Problems  // Check's problems, when it rejects the text
}

// judgeCases returns the texts to judge on build b:
//   - every bool, int and float flag of b with values Check accepts (true, false, 1, 0, TRUE,
//     False and the bare name; 7, +7, 007 and the default; 1.5, -2, .5, 5., 1E-3, inf, nan and
//     the default) and with one value it rejects (for bools "yes", "" or "2"; for ints "1.5", ""
//     or "7abc", and one past the range of its width; for floats "1.5f", "", "abc" or "1,5");
//   - every flag whose default is a value, set to it; every value of every tabulated enum (the
//     enum and list flags' texts only logged);
//   - range edges and blanks inside quotes on one int32, int64 and float flag;
//   - the 2024 tutorial's five flags, one by one and together;
//   - names b does not know: made up, a typo, flags of other builds, a bare int flag, one dash;
//   - every preset as Resolve gives it for b.
func judgeCases(b Build) []judgeCase {
	var cs []judgeCase
	logOnly := false
	add := func(about string, texts ...string) {
		for _, text := range texts {
			cs = append(cs, judgeCase{text: text, about: about, logOnly: logOnly})
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
		logOnly = f.Kind == KindEnum || f.Kind == KindList
		if f.Kind == KindEnum {
			add("a value of enum flag "+f.Name, set(f.Name, f.Values...)...)
		}
		if f.DefaultComputed == "" && !f.NoOp {
			add("the default of "+about, newSetting(f.Name, f.Default, "", "").String())
		}
		logOnly = false
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

// freeTextCases returns one setting per string, list and untabulated enum flag of b, with a
// text Check accepts but whose meaning it does not check. The judge logs the ones the plugin
// refuses: Check does not claim to know their values.
func freeTextCases(b Build) []judgeCase {
	var cs []judgeCase
	for _, f := range b.Flags() {
		if f.Kind == KindString || f.Kind == KindList || f.Kind == KindEnum && len(f.Values) == 0 {
			cs = append(cs, judgeCase{text: "--" + f.Name + "=onegpu-judge-text", about: "any text for " + f.Type() + " flag " + f.Name, logOnly: true})
		}
	}
	return cs
}

// judge runs the probes of TestPluginJudge and collects what it finds.
type judge struct {
	t        *testing.T
	prober   pjrtprobe.Prober
	children atomic.Int64
	mu       sync.Mutex
	gaps     []string
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
		if c.logOnly {
			j.mu.Lock()
			defer j.mu.Unlock()
			j.gaps = append(j.gaps, fmt.Sprintf("%s (%s): Check rejects it, the plugin accepts it", c.text, c.about))
			return
		}
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
	case strings.Contains(msg, "Couldn't interpret value"), strings.Contains(msg, "out of the int"):
		want = pjrtprobe.BadValue
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
	case len(cases) == 1 && cases[0].logOnly:
		j.mu.Lock()
		defer j.mu.Unlock()
		j.gaps = append(j.gaps, fmt.Sprintf("%s (%s): Check accepts it, the plugin refuses it (%s)", cases[0].text, cases[0].about, r.Summary()))
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
