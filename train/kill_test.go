package train_test

import (
	"bufio"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gomlx/gomlx/pkg/core/tensors"

	"github.com/onegpu/onegpu/data"
	"github.com/onegpu/onegpu/train"
	"github.com/onegpu/onegpu/train/checkpoint"
)

var kills = flag.Int("kills", 5, "SIGKILLs of TestKilledRunsResumeExactly (the issue's full check: -kills 50)")

// killSeedEnv replays TestKilledRunsResumeExactly's kill moments: the test logs the seed it drew,
// and ONEGPU_KILL_SEED=<that seed> draws the same fractions of a run's time again.
const killSeedEnv = "ONEGPU_KILL_SEED"

// killSeed returns the seed of the kill moments: $ONEGPU_KILL_SEED when set, else the clock.
func killSeed(t *testing.T) uint64 {
	s := os.Getenv(killSeedEnv)
	if s == "" {
		return uint64(time.Now().UnixNano())
	}
	seed, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		t.Fatalf("$%s=%q: want the unsigned integer a failed run logged", killSeedEnv, s)
	}
	return seed
}

// childEnv makes the test binary a training child: it trains smallMLP in the named folder (see
// trainChild) instead of running tests.
const childEnv = "ONEGPU_TRAIN_CHILD_DIR"

func TestMain(m *testing.M) {
	if dir := os.Getenv(childEnv); dir != "" {
		os.Exit(trainChild(dir))
	}
	os.Exit(m.Run())
}

// killSteps is how far the killed runs train, saving every step.
const killSteps = 40

// trainChild trains smallMLP up to killSteps global steps in dir, saving every step, printing a
// progress line per step. Exit status 3 means the folder was locked by another run.
func trainChild(dir string) int {
	c := smallMLP(nil)
	tr, err := train.New(embedded(), c)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer tr.Close()
	steps := killSteps
	if s := os.Getenv("ONEGPU_TRAIN_CHILD_STEPS"); s != "" {
		steps, _ = strconv.Atoi(s)
	}
	var batches data.Data = mlpData(c)
	if os.Getenv(holdEnv) != "" {
		batches = heldData{batches, &sync.Once{}}
	}
	_, err = tr.Run(batches, train.RunOptions{Steps: steps, CheckpointDir: dir, SaveEvery: 1, Keep: 2, Progress: os.Stdout, LogEvery: 1})
	var locked *checkpoint.FolderLockedError
	if errors.As(err, &locked) {
		fmt.Fprintln(os.Stderr, err)
		return 3
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

// child starts the test binary as a training child in dir, its stdout piped.
func child(t testing.TB, dir string, env ...string) (*exec.Cmd, *bufio.Scanner) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(append(os.Environ(), childEnv+"="+dir), env...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	return cmd, bufio.NewScanner(out)
}

var (
	stepLine   = regexp.MustCompile(`step\s+(\d+)/`)
	resumeLine = regexp.MustCompile(`^resuming from step (\d+)`)
)

// TestKilledRunsResumeExactly: a run that saves every step is killed with SIGKILL at random
// moments (during steps and during saves); every restart resumes from the newest whole checkpoint
// — the step the killed run had finished, or the one before if its save was cut — and the run
// resumed after all kills ends with the weights of an uninterrupted run, bit for bit (float32,
// embedded backend). -kills N sets the number of kills (default 5; the check is 50). The
// kill moments are fractions of a run's time drawn from a seed the test logs; $ONEGPU_KILL_SEED
// replays them (the moments scale with the measured run time, so a replay kills at the same
// fractions, not the same instants).
func TestKilledRunsResumeExactly(t *testing.T) {
	seed := killSeed(t)
	t.Logf("kill moments drawn with seed %d (replay: %s=%d)", seed, killSeedEnv, seed)
	rng := rand.New(rand.NewPCG(seed, 16))
	straight := filepath.Join(t.TempDir(), "straight")
	start := time.Now()
	cmd, _ := child(t, straight)
	if err := cmd.Wait(); err != nil {
		t.Fatalf("uninterrupted run: %v (%s)", err, cmd.Stderr)
	}
	perRun := time.Since(start)
	want := weights(t, straight)

	dir := filepath.Join(t.TempDir(), "killed")
	// Once a run printed step k, the checkpoint of step k-2 is committed (k-1's commits after step
	// k's loss is known finite), so a restart must resume from a step in [resumed, reached].
	resumed, reached, killed, inSave, finished := 0, 0, 0, 0, 0
	for killed < *kills {
		cmd, out := child(t, dir)
		lastStep := -1
		// A random moment of the time the run needs: start-up plus the steps left.
		left := max(0.3, float64(killSteps-resumed)/killSteps)
		timer := time.AfterFunc(time.Duration(rng.Float64()*left*float64(perRun)), func() { _ = cmd.Process.Kill() })
		for out.Scan() {
			line := out.Text()
			if m := resumeLine.FindStringSubmatch(line); m != nil {
				step, _ := strconv.Atoi(m[1])
				if step < resumed || step > reached {
					t.Fatalf("resumed from step %d; want the newest whole checkpoint, from step %d to %d", step, resumed, reached)
				}
				resumed = step
			}
			if m := stepLine.FindStringSubmatch(line); m != nil {
				lastStep, _ = strconv.Atoi(m[1])
				reached = max(reached, lastStep)
			}
		}
		timer.Stop()
		err := cmd.Wait()
		var exit *exec.ExitError
		switch {
		case err == nil:
			// Finished before the kill: start over in a fresh folder's worth of steps.
			if lastStep >= 0 && lastStep != killSteps {
				t.Fatalf("the run ended at step %d, want %d", lastStep, killSteps)
			}
			sameWeights(t, want, weights(t, dir))
			finished++
			resumed, reached, dir = 0, 0, filepath.Join(t.TempDir(), fmt.Sprintf("killed-%d", killed))
			continue
		case errors.As(err, &exit) && exit.ExitCode() == -1:
			killed++
		default:
			t.Fatalf("run %d failed: %v (%s)", killed, err, cmd.Stderr)
		}
		if cutSave(dir) {
			inSave++
		}
		resumed = max(resumed, lastStep-2)
	}
	cmd, out := child(t, dir)
	for out.Scan() {
		if m := resumeLine.FindStringSubmatch(out.Text()); m != nil {
			if step, _ := strconv.Atoi(m[1]); step < resumed {
				t.Errorf("the last run resumed from step %d, before step %d", step, resumed)
			}
		}
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("the run after %d kills: %v (%s)", killed, err, cmd.Stderr)
	}
	sameWeights(t, want, weights(t, dir))
	t.Logf("%d kills (%d of them cut a save; %d runs ended before their kill), an uninterrupted run takes %v",
		killed, inSave, finished, perRun.Round(time.Millisecond))
}

// cutSave reports whether a kill cut a save: a staged checkpoint without its manifest (being
// written or synced) or files in the folder without their .json (being renamed into place).
func cutSave(dir string) bool {
	staged, _ := filepath.Glob(filepath.Join(dir, ".onegpu-staging", "checkpoint-*.json"))
	manifests, _ := filepath.Glob(filepath.Join(dir, ".onegpu-staging", "checkpoint-*.onegpu"))
	if len(staged) != len(manifests) {
		return true
	}
	committedFiles, _ := filepath.Glob(filepath.Join(dir, "checkpoint-*"))
	jsons, _ := filepath.Glob(filepath.Join(dir, "checkpoint-*.json"))
	return len(committedFiles) != 3*len(jsons)
}

// TestConcurrentWritersAreRefused: 12 times, two runs start on one folder at once; whichever
// comes second is refused, naming the folder and the first's pid, and the folder then resumes.
// The runs wait before their first step until the test lets them go, so they overlap every time.
func TestConcurrentWritersAreRefused(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "ck")
	type ended struct {
		cmd *exec.Cmd
		err error
	}
	for trial := range 12 {
		steps := "ONEGPU_TRAIN_CHILD_STEPS=" + strconv.Itoa(3*(trial+1))
		var runs [2]*exec.Cmd
		var holds [2]io.WriteCloser
		exits := make(chan ended, 2)
		for i := range runs {
			cmd := exec.Command(os.Args[0], "-test.run=^$")
			cmd.Env = append(os.Environ(), childEnv+"="+dir, steps, holdEnv+"=1")
			cmd.Stderr = &strings.Builder{}
			hold, err := cmd.StdinPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			runs[i], holds[i] = cmd, hold
			go func() { exits <- ended{cmd, cmd.Wait()} }()
		}
		refused := <-exits
		first := runs[0]
		if refused.cmd == runs[0] {
			first = runs[1]
		}
		var exit *exec.ExitError
		msg := fmt.Sprint(refused.cmd.Stderr)
		if !errors.As(refused.err, &exit) || exit.ExitCode() != 3 || !strings.Contains(msg, dir) ||
			!strings.Contains(msg, fmt.Sprintf("pid %d", first.Process.Pid)) {
			t.Fatalf("trial %d: the second writer: %v, %q; want it refused naming %s and pid %d", trial, refused.err, msg, dir, first.Process.Pid)
		}
		for _, h := range holds {
			h.Close()
		}
		if e := <-exits; e.err != nil {
			t.Fatalf("trial %d: the first writer: %v (%s)", trial, e.err, e.cmd.Stderr)
		}
	}
	ck, err := train.OpenCheckpoints(dir, smallMLP(t), 2)
	if err != nil || ck.ResumeStep != 36 {
		t.Fatalf("the folder after 12 trials: %v, %+v; want it to resume at step 36", err, ck)
	}
	ck.Close()
}

// holdEnv makes a training child wait before its first step until its stdin closes.
const holdEnv = "ONEGPU_TRAIN_CHILD_HOLD"

// heldData waits for stdin to close before the first batch.
type heldData struct {
	data.Data
	once *sync.Once
}

func (d heldData) Record() string { return train.DataRecord(d.Data) }

func (d heldData) Batch(step int) []*tensors.Tensor {
	d.once.Do(func() { _, _ = io.Copy(io.Discard, os.Stdin) })
	return d.Data.Batch(step)
}
