// Package pjrtprobe asks a real PJRT plugin what it does with an XLA_FLAGS value. XLA parses
// XLA_FLAGS when a plugin creates its first client, and ends the process on a flag it does not
// know or a value it cannot read, so every question is asked in a child process: the child
// creates a client with the plugin (and, with Prober.Compile, compiles and runs a small program:
// XLA reads some flags only when it compiles, and LLVM ends the process on an option of
// xla_backend_extra_options it does not know) and exits 0; the parent reads the child's exit
// status and standard error.
//
// The child is the parent's own executable started again with ChildEnv set: a command calls
// RunChildIfAsked first thing in main, a test first thing in TestMain. flags/internal/plugintable
// uses it to derive a build's flag table, and the flags package's judge test to hold Set.Check
// to what the plugin does.
package pjrtprobe

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"time"
)

// ChildEnv, set in a process's environment, makes RunChildIfAsked create a client with the
// plugin it names (an absolute path or a plugin name go-xla can find) and exit.
const ChildEnv = "ONEGPU_PJRT_PROBE_CHILD"

// compileEnv, set to 1 in a child's environment, makes it compile and run a program too.
const compileEnv = "ONEGPU_PJRT_PROBE_COMPILE"

// childPrefix starts the line a child prints when its client exists.
const childPrefix = "pjrtprobe: client "

// Outcome is what the plugin did with an XLA_FLAGS value.
type Outcome int

// The outcomes of a probe.
const (
	// Accepted: the client was created, so XLA parsed every flag.
	Accepted Outcome = iota + 1
	// UnknownFlag: XLA ended the process with "Unknown flag(s) in XLA_FLAGS".
	UnknownFlag
	// BadValue: XLA knows the flag but ended the process on its value ("Couldn't interpret
	// value", or a flag's own setter refused it: "Flag parsing failed").
	BadValue
	// UnknownLLVMOption: LLVM ended the process, when XLA compiled the child's program, on an
	// option it does not know ("Unknown command line argument"): an item of
	// xla_backend_extra_options that XLA hands to LLVM.
	UnknownLLVMOption
	// Failed: the child failed some other way (the plugin did not load, the client could not
	// be created, a crash); Result.Stderr says how.
	Failed
)

// String names the outcome.
func (o Outcome) String() string {
	switch o {
	case Accepted:
		return "accepted"
	case UnknownFlag:
		return "unknown flag"
	case BadValue:
		return "bad value"
	case UnknownLLVMOption:
		return "unknown LLVM option"
	case Failed:
		return "failed"
	}
	return "outcome?"
}

// Result is one probe: the outcome, and what the child reported.
type Result struct {
	Outcome  Outcome
	ExitCode int    // -1 when the child was killed by a signal or timed out
	Stderr   string // the child's standard error
	// Platform, Major and Minor are the client's platform and the plugin's PJRT C API version,
	// set when the outcome is Accepted.
	Platform     string
	Major, Minor int
}

// Prober runs probes of one plugin. Probe is safe to call from several goroutines.
type Prober struct {
	// Plugin is the plugin's absolute path, or a name go-xla can find.
	Plugin string
	// Command starts a process that calls RunChildIfAsked first: usually os.Executable(),
	// followed by arguments that do no harm if RunChildIfAsked does not exit.
	Command []string
	// Timeout bounds each child; zero means a minute.
	Timeout time.Duration
	// Dir is the children's working folder, where the files that flags with relative paths ask
	// for land (--xla_dump_to=x writes x/ when the child compiles); empty means the parent's.
	Dir string
	// Compile makes each child also compile and run a small program after creating its
	// client, so that flags XLA reads only when it compiles are judged too.
	Compile bool
}

// Probe starts a child with XLA_FLAGS set to xlaFlags and reports what the plugin did.
// The error is for a child that could not be started at all.
func (p Prober) Probe(ctx context.Context, xlaFlags string) (Result, error) {
	if len(p.Command) == 0 {
		return Result{}, errors.New("pjrtprobe: Prober.Command is empty")
	}
	timeout := p.Timeout
	if timeout == 0 {
		timeout = time.Minute
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, p.Command[0], p.Command[1:]...)
	cmd.Env = childEnv(os.Environ(), p.Plugin, xlaFlags)
	if p.Compile {
		cmd.Env = append(cmd.Env, compileEnv+"=1")
	}
	cmd.Dir = p.Dir
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	r := Result{Stderr: stderr.String(), ExitCode: cmd.ProcessState.ExitCode()}
	if err != nil {
		var exitErr *exec.ExitError
		if !errors.As(err, &exitErr) {
			return Result{}, fmt.Errorf("pjrtprobe: starting %s: %w", p.Command[0], err)
		}
		if ctx.Err() != nil {
			r.Stderr += fmt.Sprintf("\npjrtprobe: the child ran past %v and was killed", timeout)
		}
	}
	r.Outcome = classify(r.ExitCode, r.Stderr)
	if r.Outcome == Accepted {
		line, ok := lineWith(stdout.String(), childPrefix)
		if !ok || !r.parseClient(line) {
			r.Outcome = Failed
			r.Stderr += "\npjrtprobe: the child exited 0 without reporting its client (does it call RunChildIfAsked first?): " +
				strings.TrimSpace(stdout.String())
		}
	}
	return r, nil
}

// childEnv returns env with XLA_FLAGS replaced by xlaFlags, ChildEnv naming the plugin, and
// TF_CPP_MIN_LOG_LEVEL removed so that XLA's messages are not filtered.
func childEnv(env []string, plugin, xlaFlags string) []string {
	out := make([]string, 0, len(env)+2)
	for _, kv := range env {
		name, _, _ := strings.Cut(kv, "=")
		switch name {
		case "XLA_FLAGS", ChildEnv, compileEnv, "TF_CPP_MIN_LOG_LEVEL":
			continue
		}
		out = append(out, kv)
	}
	return append(out, "XLA_FLAGS="+xlaFlags, ChildEnv+"="+plugin)
}

// classify tells the outcome from the child's exit code and standard error. XLA's messages are
// "Unknown flag in XLA_FLAGS: ..." (or "Unknown flags"), and for values "Couldn't interpret
// value V for flag F." followed by "Flag parsing failed."; a flag's own setter that refuses a
// value gives only the latter.
func classify(exitCode int, stderr string) Outcome {
	switch {
	case exitCode == 0:
		return Accepted
	case exitCode == 1 && strings.Contains(stderr, "Unknown flag"):
		return UnknownFlag
	case exitCode == 1 && (strings.Contains(stderr, "Couldn't interpret value") || strings.Contains(stderr, "Flag parsing failed")):
		return BadValue
	case exitCode == 1 && strings.Contains(stderr, "Unknown command line argument"):
		return UnknownLLVMOption
	}
	return Failed
}

func lineWith(text, prefix string) (string, bool) {
	for _, line := range strings.Split(text, "\n") {
		if rest, ok := strings.CutPrefix(line, prefix); ok {
			return rest, true
		}
	}
	return "", false
}

// parseClient reads "platform=cpu pjrt=0.115".
func (r *Result) parseClient(line string) bool {
	n, err := fmt.Sscanf(line, "platform=%s pjrt=%d.%d", &r.Platform, &r.Major, &r.Minor)
	return err == nil && n == 3
}

// Summary returns the line of the child's standard error that says why it failed (XLA's message
// about the flag, or pjrtprobe's own), else its last line; empty for an accepted probe.
func (r Result) Summary() string {
	if r.Outcome == Accepted {
		return ""
	}
	lines := strings.Split(strings.TrimRight(r.Stderr, "\n"), "\n")
	for _, marker := range []string{"Unknown flag", "Couldn't interpret value", "Flag parsing failed", "Unknown command line argument", "pjrtprobe:"} {
		for _, line := range lines {
			if i := strings.Index(line, marker); i >= 0 {
				return strings.TrimSpace(line[i:])
			}
		}
	}
	return fmt.Sprintf("exit status %d: %s", r.ExitCode, strings.TrimSpace(lines[len(lines)-1]))
}
