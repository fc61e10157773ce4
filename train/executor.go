package train

import (
	"fmt"
	"io"
	"sort"
	"strings"
	"sync"

	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/tensors"

	"github.com/onegpu/onegpu/accum"
)

// An Executor runs a trainer's step on its hardware. Each way to run it is a mode registered by
// name (RegisterMode), which Config.Offload names; the trainer creates the mode's executor the
// first time it needs one and keeps it until Close. onegpu's modes, one file each:
//
//   - "none" (executor_plain.go): the whole step on one device of the backend, or on
//     Config.Devices.Count > 1 devices with the batch split along axis 0 and the state replicated
//     or sharded by XLA's SPMD partitioner (executor_spmd.go);
//   - "optimizer" (executor_offload.go): the loss and gradients on the device, the optimizer's
//     state and update in host memory;
//   - "params" (executor_stream.go): the master weights and the optimizer's state in host memory,
//     the model streamed through the device a stage at a time.
//
// Each builds its programs from the trainer's step functions (StepFn, and for a split step
// deviceGradientsFn and the host update, hostupdate.go), compiles them on its first run and keeps
// the training state in the trainer's context, so checkpoints, resume and the loop are the same
// for all. A new mode is one file: its executor, its statistics and a RegisterMode call.
type Executor interface {
	// DeviceStep is the graph function the trainer's backend runs in one step: what
	// Trainer.Program builds for analysis.
	DeviceStep() accum.StepFn
	// Run runs one step on batch, compiling first if needed, and returns StepFn's outputs (loss,
	// metrics, count, finite flag, moving-average loss) and the graph the backend ran.
	Run(batch []*tensors.Tensor) ([]*tensors.Tensor, *graph.Graph, error)
	// Stats is what the last step reports besides its metrics (traffic between host and device
	// memory, the time of each part), of the mode's own type; nil when the mode reports nothing.
	Stats() Stats
	// Close releases the compiled programs and what the executor holds besides the context.
	Close()
}

// Stats is what an executor reports of its steps besides their metrics, each mode its own type
// (OffloadStats, StreamStats). The loop keeps a run's in History.Offload and prints its summary.
type Stats interface {
	// Mean returns a run's figures from its first step's (the receiver's) and its later steps'
	// (of the receiver's type), as the mode reports them: the receiver when there is no later
	// step, else the later steps' mean times.
	Mean(later []Stats) Stats
	// WriteSummary writes the run's lines of the mode in History.WriteSummary.
	WriteSummary(w io.Writer)
}

// meanOfLater returns a copy of the last of later (a step's sizes: bytes per step) with the times
// that seconds points at in a T averaged over later, a mode's Stats.Mean.
func meanOfLater[T any](later []Stats, seconds func(*T) []*float64) *T {
	m := *any(later[len(later)-1]).(*T)
	mean := seconds(&m)
	for _, p := range mean {
		*p = 0
	}
	for _, s := range later {
		for i, p := range seconds(any(s).(*T)) {
			*mean[i] += *p / float64(len(later))
		}
	}
	return &m
}

// Mode is a way to run the step: its executor and what it refuses.
type Mode struct {
	// New returns the mode's executor of t (whose Config was validated).
	New func(t *Trainer) Executor
	// Check refuses, naming the Config field, a run the mode cannot do (Config.Validate calls
	// it); nil refuses nothing.
	Check func(c Config) error
	// Stats returns a new zero value of the mode's statistics type, into which a History read
	// back from JSON decodes them; nil for a mode that reports none.
	Stats func() Stats
	// Staged says the mode runs a Staged model a stage at a time: each of its programs holds one
	// block of one micro-batch (Config.UnrolledBlocks counts 1), and its embedding stage takes the
	// batch's tokens (no input embedding gathered on the host).
	Staged bool
}

var (
	modesMu sync.Mutex
	modes   = map[string]Mode{}
)

// RegisterMode makes name a value of Config.Offload (and of ParseOffload, the CLI's --offload)
// that runs the step with m. It panics when the name is taken or m has no New: modes are
// registered once, at init.
func RegisterMode(name string, m Mode) {
	modesMu.Lock()
	defer modesMu.Unlock()
	if _, taken := modes[name]; taken || name == "" || m.New == nil {
		panic(fmt.Sprintf("train.RegisterMode(%q): the name is empty or taken, or the mode has no New", name))
	}
	modes[name] = m
}

// modeOf returns the mode o names, or an error listing the modes.
func modeOf(o Offload) (Mode, error) {
	modesMu.Lock()
	m, ok := modes[o.String()]
	modesMu.Unlock()
	if !ok {
		return Mode{}, fmt.Errorf("unknown Config.Offload %q: use %s", string(o), strings.Join(ModeNames(), " or "))
	}
	return m, nil
}

// ModeNames lists the registered modes, "none" first, then sorted.
func ModeNames() []string {
	modesMu.Lock()
	defer modesMu.Unlock()
	names := make([]string, 0, len(modes))
	for name := range modes {
		if name != OffloadNone.String() {
			names = append(names, name)
		}
	}
	sort.Strings(names)
	return append([]string{OffloadNone.String()}, names...)
}

// Offload names the mode that runs the step (RegisterMode): OffloadNone (the zero value: the
// step on the device or devices), OffloadOptimizer, OffloadParams, or a mode of your own.
type Offload string

const (
	// OffloadNone keeps everything on the device(s) that run the step.
	OffloadNone Offload = ""
	// OffloadOptimizer keeps the optimizer's state and its update in host memory (the host update:
	// optim/hostengine, as OffloadParams), and the device computes the loss and the gradients only
	// (ZeRO-Offload's split; see OffloadStats). One device only.
	OffloadOptimizer Offload = "optimizer"
	// OffloadParams keeps the float32 master weights, the gradients and the optimizer's state in
	// host memory and streams the model through the device a stage at a time (executor_stream.go):
	// the device holds one stage's weights, its gradients and the kept stage inputs, not the
	// model. The model must be Staged (models.GPT, models.Llama); one device only.
	OffloadParams Offload = "params"
)

// String is the mode as --offload spells it: "none" for OffloadNone.
func (o Offload) String() string {
	if o == OffloadNone {
		return "none"
	}
	return string(o)
}

// ParseOffload reads a registered mode's name: "none" (or ""), "optimizer", "params", ...
func ParseOffload(s string) (Offload, error) {
	o := Offload(s)
	if s == OffloadNone.String() {
		o = OffloadNone
	}
	if _, err := modeOf(o); err != nil {
		return OffloadNone, err
	}
	return o, nil
}

// checkOffload refuses an unknown Config.Offload and what its mode cannot do.
func (c Config) checkOffload() error {
	m, err := modeOf(c.Offload)
	if err != nil {
		return err
	}
	if m.Check == nil {
		return nil
	}
	return m.Check(c)
}

// staged reports whether o names a mode that runs the model a stage at a time (Mode.Staged).
func (o Offload) staged() bool {
	m, err := modeOf(o)
	return err == nil && m.Staged
}

// noBudget refuses a device budget in a mode that does not bound the device's memory.
func noBudget(c Config) error {
	if c.DeviceBudget != 0 {
		return fmt.Errorf("a device budget (Config.DeviceBudget %d bytes) with Config.Offload %s: the budget bounds a streamed step; use Config.Offload params, or no budget",
			c.DeviceBudget, c.Offload)
	}
	return nil
}

// executor returns the trainer's executor, creating it on first use.
func (t *Trainer) executor() Executor {
	if t.exec == nil {
		m, err := modeOf(t.Config.Offload)
		if err != nil {
			panic(err) // New validated the config
		}
		t.exec = m.New(t)
	}
	return t.exec
}

// ExecutorStats returns what the trainer's executor reported of the last step (OffloadStats,
// StreamStats, ...), nil when it reports nothing or no step ran.
func (t *Trainer) ExecutorStats() Stats {
	if t.exec == nil {
		return nil
	}
	return t.exec.Stats()
}

// args turns a batch into executor arguments, one tensor each.
func args(batch []*tensors.Tensor) []any {
	out := make([]any, len(batch))
	for i, b := range batch {
		out[i] = b
	}
	return out
}
