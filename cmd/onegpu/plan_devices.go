package main

import (
	"fmt"
	"io"

	"github.com/gomlx/gomlx/backends"

	"github.com/onegpu/onegpu/analysis"
	"github.com/onegpu/onegpu/plan"
	"github.com/onegpu/onegpu/platform"
	"github.com/onegpu/onegpu/train"
)

// devicePlan is `onegpu plan --devices N --json`: the fewest devices the step fits on, and the
// fastest configuration on each device count.
type devicePlan struct {
	Config      string `json:"config"`
	Backend     string `json:"backend"`
	BudgetBytes int64  `json:"budget_bytes"`
	MaxDevices  int    `json:"max_devices"`
	// Fewest is the fastest configuration on the fewest devices that fit; nil when none fits.
	Fewest *plan.DeviceCandidate `json:"fewest_devices"`
	// XLAPerDeviceBytes is XLA's compiled total for one device of Fewest, when the backend is XLA
	// with enough devices (the partitioned step compiled, not run); 0 otherwise.
	XLAPerDeviceBytes int64 `json:"xla_compiled_per_device_bytes,omitempty"`
	// XLARefused are the candidates the estimate let fit but XLA's compiled figure did not, in the
	// order they were tried before Fewest.
	XLARefused []xlaRefusal `json:"xla_refused,omitempty"`
	// FastestOn has, for each device count, the fastest configuration that fits on it, or the
	// smallest one with fits false.
	FastestOn []plan.DeviceCandidate `json:"fastest_on_each_count"`
	Rows      []plan.DeviceCandidate `json:"rows"`
}

// planDevices answers with a device count: the fewest of up to maxDevices devices whose share of
// the step fits the budget, and how to use each count.
func planDevices(w io.Writer, backend backends.Backend, spec platform.BackendSpec, base train.Config, budget int64, rate plan.Throughput, maxDevices int, asJSON bool) error {
	embedded, err := platform.NewBackend("go") // the estimate is the same on every backend, and quickest built here
	if err != nil {
		return err
	}
	defer embedded.Finalize()
	rows, err := plan.SearchDevices(embedded, base, budget, rate, maxDevices)
	if err != nil {
		return err
	}
	out := devicePlan{Config: describe(base), Backend: spec.String(), BudgetBytes: budget, MaxDevices: maxDevices, Rows: rows}
	for _, n := range plan.DeviceCounts(maxDevices, base.Batch) {
		if i := plan.FastestOn(rows, n); i >= 0 {
			out.FastestOn = append(out.FastestOn, rows[i])
		} else if i := smallestOn(rows, n); i >= 0 {
			out.FastestOn = append(out.FastestOn, rows[i])
		}
	}
	if err := out.answer(rows, compiledPerDevice(backend, spec, base)); err != nil {
		return err
	}
	if asJSON {
		return writeJSON(w, out)
	}
	fmt.Fprintf(w, "plan for %s, on up to %d devices\n"+
		"budget %s per device; memory per device from the sequential-execution estimate, each kind by its share\n"+
		"(activations split with the batch; weights, gradients and optimizer state as --shard splits them);\n"+
		"time from FLOPs split over the devices at %g (f32) / %g (bf16) TFLOP/s, without the collectives\n\n",
		describe(base), maxDevices, analysis.FormatBytes(budget), rate.Float32, rate.BFloat16)
	if f := out.Fewest; f != nil {
		for _, r := range out.XLARefused {
			fmt.Fprintf(w, "tried %s, %s, remat %s, k=%d: XLA's compiled total per device is %s, over the budget\n",
				devicesAndShard(r.DeviceCandidate), r.Compute, r.Remat, r.MicroBatches, analysis.FormatBytes(r.XLABytes))
		}
		if len(out.XLARefused) > 0 && out.XLAPerDeviceBytes == 0 {
			fmt.Fprintf(w, "XLA refused the %d candidates it compiled: the answer below is the estimate's, unconfirmed (leave XLA more room: a larger --budget)\n", len(out.XLARefused))
		}
		fmt.Fprintf(w, "fewest devices: %s, %s compute, remat %s, %d micro-batches: %s per device, about %.3f s per step\n",
			devicesAndShard(*f), f.Compute, f.Remat, f.MicroBatches, analysis.FormatBytes(f.PerDeviceBytes), f.Seconds)
		if out.XLAPerDeviceBytes > 0 {
			fmt.Fprintf(w, "  XLA's compiled total for one device of it: %s\n", analysis.FormatBytes(out.XLAPerDeviceBytes))
		}
	} else {
		fmt.Fprintf(w, "nothing fits on %d devices: use a smaller --preset, a larger budget or more devices\n", maxDevices)
	}
	fmt.Fprintln(w, "\nthe fastest configuration on each device count:")
	fmt.Fprintf(w, "  %-7s %-9s %-8s %-9s %3s %12s %10s %s\n", "devices", "shard", "compute", "remat", "k", "per device", "step", "fits")
	for _, r := range out.FastestOn {
		fits := "yes"
		if !r.Fits {
			fits = "no (the smallest on this count)"
		}
		fmt.Fprintf(w, "  %-7d %-9s %-8s %-9s %3d %12s %9.3fs %s\n", r.Devices, r.Shard, r.Compute, r.Remat, r.MicroBatches, analysis.FormatBytes(r.PerDeviceBytes), r.Seconds, fits)
	}
	return nil
}

// xlaRefusal is a candidate whose compiled step needs more than the budget on one device.
type xlaRefusal struct {
	plan.DeviceCandidate
	XLABytes int64 `json:"xla_compiled_per_device_bytes"`
}

// xlaChecks bounds how many candidates an XLA backend compiles before the answer is left to the
// estimate: each compile of the tutorial's step takes minutes on a CPU.
const xlaChecks = 4

// answer sets Fewest: the first candidate on the fewest devices that fits. When compiled is not
// nil (an XLA backend) each candidate is compiled in that order until XLA's figure for one device
// fits too (at most xlaChecks; after that the estimate's answer stands, with XLA's refusals
// listed). compiled reports ok false for a candidate it cannot compile (too few devices).
func (p *devicePlan) answer(rows []plan.DeviceCandidate, compiled func(plan.DeviceCandidate) (bytes int64, ok bool, err error)) error {
	order := plan.ByFewestDevices(rows)
	if len(order) == 0 {
		return nil
	}
	p.Fewest = &rows[order[0]]
	if compiled == nil {
		return nil
	}
	for _, i := range order[:min(len(order), xlaChecks)] {
		total, ok, err := compiled(rows[i])
		if err != nil || !ok {
			return err
		}
		if total <= p.BudgetBytes {
			p.Fewest, p.XLAPerDeviceBytes = &rows[i], total
			return nil
		}
		p.XLARefused = append(p.XLARefused, xlaRefusal{rows[i], total})
	}
	return nil
}

// compiledPerDevice returns a function that compiles a candidate's step partitioned across its
// devices on backend and returns XLA's total for one device; nil unless backend is XLA's.
func compiledPerDevice(backend backends.Backend, spec platform.BackendSpec, base train.Config) func(plan.DeviceCandidate) (int64, bool, error) {
	if spec.Kind != "xla" {
		return nil
	}
	return func(c plan.DeviceCandidate) (int64, bool, error) {
		if backend.NumDevices() < c.Devices {
			return 0, false, nil
		}
		config, err := c.Config(base)
		if err != nil {
			return 0, false, err
		}
		trainer, err := train.New(backend, config)
		if err != nil {
			return 0, false, err
		}
		dp, err := trainer.DeviceProgram()
		if err != nil {
			return 0, false, err
		}
		defer dp.Program.Graph.Finalize()
		return dp.Compiled.TotalBytes(), true, nil
	}
}

// smallestOn returns the candidate on n devices with the least memory per device, or -1.
func smallestOn(rows []plan.DeviceCandidate, n int) int {
	best := -1
	for i, r := range rows {
		if r.Devices == n && (best < 0 || r.PerDeviceBytes < rows[best].PerDeviceBytes) {
			best = i
		}
	}
	return best
}

func devicesAndShard(c plan.DeviceCandidate) string {
	if c.Devices == 1 {
		return "1 device"
	}
	return fmt.Sprintf("%d devices with --shard %s", c.Devices, c.Shard)
}
