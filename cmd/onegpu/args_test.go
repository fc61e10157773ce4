package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"io"
	"math"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/onegpu/onegpu/platform"
)

// TestMain lets the test binary be the onegpu command: with onegpuCLIEnv set it runs main with
// the arguments after "--", so that tests see exit statuses and standard error as a user does.
func TestMain(m *testing.M) {
	if os.Getenv(onegpuCLIEnv) == "1" {
		for i, a := range os.Args {
			if a == "--" {
				os.Exit(runMain(os.Args[i+1:]))
			}
		}
		os.Exit(runMain(nil))
	}
	os.Exit(m.Run())
}

const onegpuCLIEnv = "ONEGPU_TEST_RUN_CLI"

// runCLI runs `onegpu args...` in a child process and returns its exit status and standard error.
func runCLI(t *testing.T, args ...string) (int, string) {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(self, append([]string{"-test.run=^$", "--"}, args...)...)
	cmd.Env = append(os.Environ(), onegpuCLIEnv+"=1", platform.EnvBackend+"=", platform.EnvPlugin+"=")
	var stderr bytes.Buffer
	cmd.Stderr, cmd.Stdout = &stderr, io.Discard
	err = cmd.Run()
	if _, ok := err.(*exec.ExitError); err != nil && !ok {
		t.Fatal(err)
	}
	return cmd.ProcessState.ExitCode(), stderr.String()
}

// runners call each command in-process, writing its report to w.
var runners = map[string]func(args []string, w io.Writer) error{
	"train":   runTrain,
	"memory":  runMemory,
	"bench":   runBench,
	"plan":    runPlan,
	"compare": func(args []string, w io.Writer) error { return runCompare(args, w, w) },
	"flags":   runFlags,
	"env":     runEnv,
}

// TestBadFlagValues: every flag value that cannot work is an error naming the flag and the
// value, before any work, where the flag package, or a zero meaning "default", let it through
// before: zero counts, empty strings, NaN and Inf, negative sizes, stray words (which made the
// flag package drop every later flag), unknown enum values and flags that do not apply.
func TestBadFlagValues(t *testing.T) {
	t.Setenv(platform.EnvBackend, "")
	t.Setenv(platform.EnvPlugin, "")
	old := newFlagSetHook
	newFlagSetHook = func(fs *flag.FlagSet) { fs.SetOutput(io.Discard) } // no usage after each error
	defer func() { newFlagSetHook = old }()
	tests := []struct {
		command string
		args    []string
		want    string
	}{
		{"train", []string{"--microbatches", "0"}, "--microbatches 0: must be at least 1"},
		{"train", []string{"--policy", ""}, "--policy '': give a value"},
		{"train", []string{"--steps", "-1"}, "--steps -1"},
		{"train", []string{"--batch", "0"}, "--batch 0: must be at least 1"},
		{"train", []string{"--batch", "-16"}, "--batch -16"},
		{"train", []string{"--batch", "99999999999999999999"}, "value out of range"},
		{"train", []string{"--batch", "1099511627776", "--microbatches", "1"}, "more than onegpu counts"},
		{"train", []string{"--lr", "NaN"}, "--lr NaN: give a finite number"},
		{"train", []string{"--lr", "Inf"}, "--lr +Inf: give a finite number"},
		{"train", []string{"--lr", "0"}, "--lr 0: the peak learning rate must be positive"},
		{"train", []string{"--lr", "-1e-3"}, "--lr -0.001"},
		{"train", []string{"--dropout", "1"}, "--dropout 1: the dropout rate must be in [0, 1)"},
		{"train", []string{"--dropout", "nan"}, "--dropout NaN"},
		{"train", []string{"--remat", ""}, "--remat ''"},
		{"train", []string{"--backend", ""}, "--backend ''"},
		{"train", []string{"--model", ""}, "--model ''"},
		{"train", []string{"--model", "resnet"}, `unknown --model "resnet"`},
		{"train", []string{"--data", "wiki"}, `unknown --data "wiki"`},
		{"train", []string{"--loss-scale", "sometimes"}, `unknown loss scale "sometimes"`},
		{"train", []string{"--log-every", "-5"}, "--log-every -5: must be at least 1"},
		{"train", []string{"mlp", "--steps", "1", "--model", "mlp", "--json"}, "unexpected argument \"mlp\": flags start with -"},
		{"train", []string{"--steps", "1", "extra"}, "unexpected argument \"extra\""},
		{"train", []string{"--model", "gpt", "--remat", "none", "--remat-policy", "dots_saveable"}, "--remat-policy dots_saveable does not apply: nothing is rematerialized"},
		{"train", []string{"--model", "mlp", "--remat-policy", "dots_saveable"}, "--remat-policy dots_saveable does not apply"},
		{"train", []string{"--model", "mlp", "--preset", "small"}, "--preset does not apply"},
		{"train", []string{"--model", "mlp", "--data", "synthetic"}, "--data does not apply"},
		{"train", []string{"--xla-preset", "fast-compile"}, "does not apply: the backend is go:ops_sequential"},
		{"train", []string{"--seed", "-1"}, `invalid value "-1" for flag -seed`},
		{"train", []string{"--plot", ""}, "--plot ''"},
		{"train", []string{"--attention", "flash"}, `--attention "flash": want plain|chunked`},
		{"train", []string{"--attention", "chunked=0"}, `--attention block "0": want a positive number of tokens`},
		{"train", []string{"--attention", "chunked=64x"}, `--attention key block "": want a positive number`},
		{"train", []string{"--cross-entropy", "chunked=-3"}, `--cross-entropy chunk "-3": want a positive number`},
		{"train", []string{"--cross-entropy", "plain=4"}, `--cross-entropy "plain=4": want plain|chunked[=CHUNK]`},
		{"train", []string{"--seq", "0"}, "--seq 0: a sequence has at least 1 token"},
		{"train", []string{"--seq", "1073741824"}, "attention scores (micro-batch × heads × SeqLen²) would be 9.22e+18 values"},
		{"train", []string{"--model", "mlp", "--seq", "512"}, "--seq does not apply: the mlp is not a language model"},
		{"train", []string{"--model", "mlp", "--attention", "chunked"}, "--attention does not apply: the mlp is not a language model"},
		{"memory", []string{"--timeline", "/nonexistent/t.png"}, "--timeline /nonexistent/t.png: the folder /nonexistent does not exist"},
		{"memory", []string{"--microbatches", "0"}, "--microbatches 0"},
		{"memory", []string{"--residuals"}, "--residuals does not apply"},
		{"memory", []string{"--lr", "1e-3"}, "--lr does not apply"},
		{"memory", []string{"--model", "gpt", "--preset", "tiny", "tiny"}, "unexpected argument \"tiny\""},
		{"bench", []string{"--steps", "0"}, "--steps 0"},
		{"bench", []string{"--remat", "block"}, "--remat does not apply: the grid sets"},
		{"bench", []string{"--estimate-only", "--steps", "5"}, "--steps does not apply: --estimate-only runs no steps"},
		{"bench", []string{"tiny"}, "unexpected argument \"tiny\""},
		{"bench", []string{"--grid", "all"}, `unknown --grid "all"`},
		{"bench", []string{"--grid", "chunking", "--attention", "chunked"}, "--attention does not apply: the grid tries plain and chunked"},
		{"bench", []string{"--model", "mlp"}, "--model mlp: the grids vary a transformer's remat and attention"},
		{"plan", []string{"--longest", "--seq", "1024"}, "--seq does not apply: --longest searches the sequence length itself"},
		{"plan", []string{"--longest", "--model", "mlp"}, "--longest: the mlp is not a language model"},
		{"plan", []string{"--longest", "--devices", "2"}, "--devices does not apply: --longest answers for one device"},
		{"plan", []string{"--budget", "0"}, `"0" is not a size`},
		{"plan", []string{"--budget", "-24GiB"}, `"-24GiB" is not a size`},
		{"plan", []string{"--budget", "InfGiB"}, `"InfGiB" is not a size`},
		{"plan", []string{"--budget", "NaNGiB"}, `"NaNGiB" is not a size`},
		{"plan", []string{"--budget", ""}, "--budget ''"},
		{"plan", []string{"--tflops-bf16", "NaN"}, "--tflops-bf16 NaN: give a finite number"},
		{"plan", []string{"--tflops-f32", "0"}, "--tflops-f32 0: an assumed throughput is from 1e-06 to 1e+06 TFLOP/s"},
		{"plan", []string{"--preset", "tiny", "--tflops-f32", "1e-320", "--json"}, "--tflops-f32 1e-320: an assumed throughput is from 1e-06 to 1e+06 TFLOP/s"},
		{"plan", []string{"--tflops-bf16", "1e9"}, "--tflops-bf16 1e+09: an assumed throughput"},
		{"plan", []string{"--budget", "9EiB"}, `"9EiB" is too large: sizes go up to 8EiB`},
		{"plan", []string{"--budget", "1e30"}, `"1e30" is too large`},
		{"plan", []string{"--budget", "1e400GiB"}, `"1e400GiB" is too large`},
		{"plan", []string{"--microbatches", "4"}, "--microbatches does not apply"},
		{"plan", []string{"--preset", "tiny", "small"}, "unexpected argument \"small\""},
		{"compare", []string{"--tol-f32", "Inf"}, "--tol-f32 +Inf: give a finite number"},
		{"compare", []string{"--tol-bf16", "-1"}, "--tol-bf16 -1: a tolerance is at least 0"},
		{"compare", []string{"--steps", "0"}, "--steps 0"},
		{"compare", []string{"--jax-accumulate", "while"}, `unknown --jax-accumulate "while"`},
		{"compare", []string{"--configs", "tpu"}, `unknown --configs "tpu"`},
		{"compare", []string{"--configs", "gpu", "--config", "--model mlp"}, "--configs does not apply"},
		{"compare", []string{"--config", "--model mlp --dropout 0.1"}, "--dropout does not apply: compare runs without dropout"},
		{"compare", []string{"--config", "mlp"}, "unexpected argument \"mlp\""},
		{"compare", []string{"--config", "--microbatches 0"}, "--microbatches 0"},
		{"compare", []string{"cpu"}, "unexpected argument \"cpu\""},
		{"flags", []string{"--build", ""}, "--build ''"},
		{"flags", []string{"check", "--build", "cuda-12", "--xla_gpu_autotune_level=2"}, "cuda-12"},
		{"env", []string{"extra"}, "unexpected argument \"extra\""},
	}
	for _, tt := range tests {
		t.Run(tt.command+" "+strings.Join(tt.args, " "), func(t *testing.T) {
			var out bytes.Buffer
			err := runners[tt.command](tt.args, &out)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("onegpu %s %q: error %v, want one containing %q", tt.command, tt.args, err, tt.want)
			}
			if out.Len() > 0 {
				t.Errorf("onegpu %s %q wrote a report before failing:\n%s", tt.command, tt.args, out.String())
			}
		})
	}
}

// TestBadFlagsExitCleanly: as a user runs it, a bad value ends onegpu with status 1 (2 for an
// unknown command), one message naming the flag, and no Go panic or goroutine dump.
func TestBadFlagsExitCleanly(t *testing.T) {
	for _, tt := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"train", "--microbatches", "0"}, 1, "onegpu train: --microbatches 0"},
		{[]string{"train", "--policy", ""}, 1, "--policy ''"},
		{[]string{"train", "--batch", "0"}, 1, "--batch 0"},
		{[]string{"train", "--steps", "-1"}, 1, "--steps -1"},
		{[]string{"train", "mlp", "--steps", "1"}, 1, `unexpected argument "mlp": flags start with -`},
		{[]string{"plan", "--budget", "0"}, 1, "--budget"},
		{[]string{"plan", "--tflops-bf16", "NaN"}, 1, "--tflops-bf16 NaN"},
		{[]string{"compare", "--tol-f32", "Inf"}, 1, "--tol-f32 +Inf"},
		{[]string{"flags", "check", "--xla_backend_extra_options=bogus"}, 1, ""},
		{[]string{"fly"}, 2, `unknown command "fly"`},
	} {
		code, stderr := runCLI(t, tt.args...)
		if code != tt.code || !strings.Contains(stderr, tt.want) {
			t.Errorf("onegpu %q: exit %d, stderr %q; want exit %d and %q", tt.args, code, stderr, tt.code, tt.want)
		}
		for _, dump := range []string{"panic:", "goroutine ", "fatal error:"} {
			if strings.Contains(stderr, dump) {
				t.Errorf("onegpu %q: Go runtime output on stderr:\n%s", tt.args, stderr)
			}
		}
	}
}

// TestHelpSaysDefaults: every flag of every command says in -h what it gives when left out,
// either as the flag package's "(default X)" or in its usage text.
func TestHelpSaysDefaults(t *testing.T) {
	for name, run := range runners {
		fs := captureFlagSet(t, name, run)
		fs.VisitAll(func(f *flag.Flag) {
			if f.DefValue != "" && f.DefValue != "0" && f.DefValue != "false" {
				return // PrintDefaults shows it
			}
			if _, isBool := f.Value.(interface{ IsBoolFlag() bool }); isBool {
				return // a bool flag left out is off
			}
			if !strings.Contains(f.Usage, "default") {
				t.Errorf("onegpu %s --%s: -h does not say what it gives when left out: %q", name, f.Name, f.Usage)
			}
		})
	}
}

// captureFlagSet returns the flag set a command parses, read from its -h output's flag names.
func captureFlagSet(t *testing.T, name string, run func([]string, io.Writer) error) *flag.FlagSet {
	t.Helper()
	var captured *flag.FlagSet
	old := newFlagSetHook
	newFlagSetHook = func(fs *flag.FlagSet) { captured = fs; fs.SetOutput(io.Discard) }
	defer func() { newFlagSetHook = old }()
	if err := run([]string{"-h"}, io.Discard); err != flag.ErrHelp {
		t.Fatalf("onegpu %s -h: %v", name, err)
	}
	if captured == nil {
		t.Fatalf("onegpu %s made no flag set with newFlagSet", name)
	}
	return captured
}

// TestMLPAccumulationWithoutDropout: with --dropout 0 the tutorial's accumulation check runs
// from the CLI: the MLP trained with 1 and with 4 micro-batches has the same losses, up to
// float32 rounding (the tutorial: 4.593200 vs 4.593173 after its steps); with dropout, the masks
// alone make them differ.
func TestMLPAccumulationWithoutDropout(t *testing.T) {
	t.Setenv(platform.EnvBackend, "")
	t.Setenv(platform.EnvPlugin, "")
	losses := func(args ...string) []float64 {
		var out bytes.Buffer
		if err := runTrain(append([]string{"--model", "mlp", "--steps", "3", "--json"}, args...), &out); err != nil {
			t.Fatal(err)
		}
		var r struct{ Steps []struct{ Loss float64 } }
		if err := json.Unmarshal(out.Bytes(), &r); err != nil {
			t.Fatal(err)
		}
		var l []float64
		for _, s := range r.Steps {
			l = append(l, s.Loss)
		}
		return l
	}
	largestRelDiff := func(a, b []float64) float64 {
		d := 0.0
		for i := range a {
			d = max(d, math.Abs(a[i]-b[i])/math.Abs(b[i]))
		}
		return d
	}
	one, four := losses("--microbatches", "1", "--dropout", "0"), losses("--microbatches", "4", "--dropout", "0")
	if d := largestRelDiff(four, one); len(one) != 3 || d > 1e-5 {
		t.Errorf("dropout 0: losses %v with 1 micro-batch, %v with 4: relative difference %.2g, want < 1e-5", one, four, d)
	}
	withDropout := losses("--microbatches", "4")
	if d := largestRelDiff(withDropout, one); d < 1e-4 {
		t.Errorf("the default dropout changed nothing (relative difference %.2g): --dropout 0 was not what made the runs agree", d)
	}
}
