package main

import (
	"flag"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"

	"github.com/gomlx/gomlx/pkg/core/dtypes"

	"github.com/onegpu/onegpu/optim"
	"github.com/onegpu/onegpu/optim/hostengine"

	"github.com/onegpu/onegpu/analysis"
	"github.com/onegpu/onegpu/plan"
	"github.com/onegpu/onegpu/platform"
	"github.com/onegpu/onegpu/train"
)

// optimizerName is the name optim.ByName knows an optimizer by (its description's head).
func optimizerName(o optim.Optimizer) string {
	if o == nil {
		return "adam"
	}
	return strings.SplitN(o.String(), "(", 2)[0]
}

// streamFlags are the flags of a streamed plan (--offload params): the host's budget and the
// rates the step's time comes from.
type streamFlags struct {
	host          string
	busGBs        float64
	hostRate      string
	streamedNames []string
}

// register adds the flags to fs.
func (f *streamFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.host, "host", "", "with --offload params (and plan --largest's streamed rows): host memory for the master weights, the optimizer's state and the gradients, e.g. 128GiB "+
		"(default: this machine's available memory, MemAvailable in /proc/meminfo)")
	fs.Float64Var(&f.busGBs, "bus-bandwidth", plan.PCIe5Bandwidth/1e9, "with --offload params: host-device bandwidth per direction in GB/s (default: PCIe 5.0 x16)")
	fs.StringVar(&f.hostRate, "host-rate", "", "with --offload params: the host's optimizer update rate in parameters/s, or \"measure\" to time the host engine "+
		"(onegpu bench --grid host's measurement, 16Mi parameters, a few seconds per optimizer) "+
		"(default: what that measured on a 2-core machine's XLA CPU client, plan.DefaultHostRates)")
	f.streamedNames = []string{"host", "bus-bandwidth", "host-rate"}
}

// notApplicable refuses the streamed flags where nothing streams.
func (f *streamFlags) notApplicable(set map[string]bool, why string) error {
	return notApplicable(set, why, f.streamedNames...)
}

// hostBudget is --host, or this machine's available memory.
func (f *streamFlags) hostBudget() (int64, error) {
	if f.host == "" {
		return plan.HostAvailable()
	}
	b, err := parseBytes(f.host)
	if err != nil {
		return 0, fmt.Errorf("--host: %w", err)
	}
	return b, nil
}

// options are the streamed step's rates; names are the optimizers whose host update --host-rate
// measure times.
func (f *streamFlags) options(rate plan.Throughput, names ...string) (plan.StreamOptions, error) {
	if !(f.busGBs > 0) || f.busGBs > 1e6 || math.IsInf(f.busGBs, 0) {
		return plan.StreamOptions{}, fmt.Errorf("--bus-bandwidth %g: give the host-device rate per direction in GB/s, more than 0 and at most 1e6", f.busGBs)
	}
	o := plan.StreamOptions{Throughput: rate, Bandwidth: f.busGBs * 1e9}
	switch f.hostRate {
	case "":
	case "measure":
		rates, err := measureHostRates(names)
		if err != nil {
			return o, fmt.Errorf("--host-rate measure: %w", err)
		}
		o.HostRates = rates
	default:
		r, err := strconv.ParseFloat(f.hostRate, 64)
		if err != nil || !(r > 0) || r > 1e15 {
			return o, fmt.Errorf("--host-rate %s: give the host's update rate in parameters/s (more than 0, at most 1e15), or measure", f.hostRate)
		}
		o.HostRate = r
	}
	return o, nil
}

// measureHostRates times each named optimizer's host update as training runs it on this machine
// (hostengine.NewBackend; the flat loop where the optimizer has one), bfloat16 parameters out.
func measureHostRates(names []string) (map[string]float64, error) {
	backend, _, err := hostengine.NewBackend()
	if err != nil {
		return nil, err
	}
	defer backend.Finalize()
	rates := map[string]float64{}
	for _, name := range names {
		opt, err := optim.ByName(name, optim.Settings{})
		if err != nil {
			return nil, err
		}
		r, err := hostengine.MeasureUpdate(hostengine.Config{Backend: backend, Optimizer: opt, Compute: dtypes.BFloat16}, 16<<20, 3, 1)
		if err != nil {
			return nil, err
		}
		rates[name] = r.ParamsPerSecond
	}
	return rates, nil
}

// writeStreamed prints a streamed step's estimate against the budgets (0: not given).
func writeStreamed(w io.Writer, s plan.Streamed, budget, host int64) {
	b := analysis.FormatBytes
	fits := func(need, have int64) string {
		if have <= 0 {
			return ""
		}
		if need <= have {
			return fmt.Sprintf("fits %s (%s free)", b(have), b(have-need))
		}
		return fmt.Sprintf("does NOT fit %s (%s over)", b(have), b(need-have))
	}
	fmt.Fprintf(w, "streamed step (--offload params): %s parameters in %d stages\n", groupDigits(s.Params), stageCount(s))
	for _, st := range s.Stages {
		frozen := ""
		if st.FrozenBytes > 0 {
			frozen = fmt.Sprintf(", frozen base %10s", b(st.FrozenBytes))
		}
		fmt.Fprintf(w, "  %-6s x%-4d %16s params, working memory %10s, state %10s%s\n", st.Name, st.Count, groupDigits(st.Params), b(st.WorkBytes), b(st.StateBytes), frozen)
	}
	fmt.Fprintf(w, "\ndevice: %s %s\n", b(s.DeviceBytes), fits(s.DeviceBytes, budget))
	fmt.Fprintf(w, "  largest stage's weights, twice (double buffer)  %10s\n", b(s.DeviceWeightBytes))
	if s.WidenBytes > 0 {
		fmt.Fprintf(w, "    of which a bfloat16 copy before it is widened %10s\n", b(s.WidenBytes))
	}
	fmt.Fprintf(w, "  its float32 gradients                           %10s\n", b(s.DeviceGradientBytes))
	fmt.Fprintf(w, "  largest stage program's working memory          %10s\n", b(s.WorkBytes))
	fmt.Fprintf(w, "  every block's input kept for the backward pass   %10s\n", b(s.KeptInputBytes))
	fmt.Fprintf(w, "host: %s %s\n", b(s.HostBytes), fits(s.HostBytes, host))
	fmt.Fprintf(w, "  float32 master weights                          %10s\n", b(s.MasterBytes))
	fmt.Fprintf(w, "  optimizer state                                 %10s\n", b(s.StateBytes))
	fmt.Fprintf(w, "  float32 gradients                               %10s\n", b(s.HostGradientBytes))
	if s.UndoBytes > 0 {
		fmt.Fprintf(w, "  undo records of the speculated update           %10s\n", b(s.UndoBytes))
	}
	if s.FrozenBytes > 0 {
		fmt.Fprintf(w, "  frozen base, as stored (no gradient, no update) %10s\n", b(s.FrozenBytes))
	}
	fmt.Fprintf(w, "\nstep: about %.3f s, bound by %s (the host update after the backward pass: %.3f s)\n", s.Seconds, s.Bound, s.SerialSeconds)
	fmt.Fprintf(w, "  device compute  %9.3f s  (%.3g FLOPs)\n", s.ComputeSeconds, float64(s.FLOPs))
	fmt.Fprintf(w, "  transfers       %9.3f s  (%s to the device, %s back, at %.0f GB/s per direction)\n", s.TransferSeconds,
		b(s.BytesToDevice), b(s.BytesToHost), s.BusBytesPerSec/1e9)
	fmt.Fprintf(w, "  host update     %9.3f s  (%.3g parameters/s)\n", s.HostSeconds, s.HostParamsPerSec)
}

func stageCount(s plan.Streamed) int {
	n := 0
	for _, st := range s.Stages {
		n += st.Count
	}
	return n
}

// planStreamed answers plan --offload params: the run's streamed step against the device budget
// and the host's.
func planStreamed(w io.Writer, s *setup, sf *streamFlags, budgetText string, rate plan.Throughput, asJSON bool) error {
	budget, err := parseBytes(budgetText)
	if err != nil {
		return fmt.Errorf("--budget: %w", err)
	}
	host, err := sf.hostBudget()
	if err != nil {
		return err
	}
	config, spec, est, err := estimateStreamed(s, sf, rate)
	if err != nil {
		return err
	}
	if asJSON {
		return writeJSON(w, struct {
			Config          string        `json:"config"`
			Backend         string        `json:"backend"`
			BudgetBytes     int64         `json:"budget_bytes"`
			HostBudgetBytes int64         `json:"host_budget_bytes"`
			Fits            bool          `json:"fits"`
			Streamed        plan.Streamed `json:"streamed"`
		}{describe(config), spec.String(), budget, host, est.DeviceBytes <= budget && est.HostBytes <= host, est})
	}
	fmt.Fprintf(w, "plan for %s, streamed\nbudget %s on the device, %s on the host; time from FLOPs at %g (f32) / %g (bf16) TFLOP/s\n\n",
		describe(config), analysis.FormatBytes(budget), analysis.FormatBytes(host), rate.Float32, rate.BFloat16)
	writeStreamed(w, est, budget, host)
	return nil
}

// memoryStreamed answers memory --offload params: the streamed step's device and host bytes,
// against --budget and --host when given.
func memoryStreamed(w io.Writer, o *memoryOptions, sf *streamFlags, set map[string]bool, budgetText string) error {
	if err := notApplicable(set, "the streamed estimate builds its stage programs itself", "stock-gradients", "dump-hlo", "residuals", "timeline", "lr", "seed"); err != nil {
		return err
	}
	var budget, host int64
	var err error
	if budgetText != "" {
		if budget, err = parseBytes(budgetText); err != nil {
			return fmt.Errorf("--budget: %w", err)
		}
	}
	if set["host"] {
		if host, err = sf.hostBudget(); err != nil {
			return err
		}
	}
	config, spec, est, err := estimateStreamed(&o.setup, sf, plan.A5000)
	if err != nil {
		return err
	}
	if o.asJSON {
		return writeJSON(w, struct {
			Backend         string        `json:"backend"`
			Model           string        `json:"model"`
			Offload         string        `json:"offload"`
			Params          int64         `json:"params"`
			BudgetBytes     int64         `json:"budget_bytes,omitempty"`
			HostBudgetBytes int64         `json:"host_budget_bytes,omitempty"`
			Streamed        plan.Streamed `json:"streamed"`
		}{spec.String(), describe(config), "params", est.Params, budget, host, est})
	}
	fmt.Fprintf(w, "%s\non %s\n\n", describe(config), spec)
	writeStreamed(w, est, budget, host)
	return nil
}

// estimateStreamed estimates the streamed step of the run s describes (plan.EstimateStreamed) at
// the device throughput rate, on s's backend.
func estimateStreamed(s *setup, sf *streamFlags, rate plan.Throughput) (train.Config, platform.BackendSpec, plan.Streamed, error) {
	config, err := s.config()
	if err != nil {
		return config, platform.BackendSpec{}, plan.Streamed{}, err
	}
	so, err := sf.options(rate, optimizerName(config.Optimizer))
	if err != nil {
		return config, platform.BackendSpec{}, plan.Streamed{}, err
	}
	backend, spec, err := s.newBackend()
	if err != nil {
		return config, spec, plan.Streamed{}, err
	}
	defer backend.Finalize()
	est, err := plan.EstimateStreamed(backend, config, so)
	return config, spec, est, err
}

// streamedOptimizers are the optimizers of plan --largest's streamed rows.
func streamedOptimizers() []string {
	var names []string
	for _, o := range plan.StreamedTechniques {
		names = append(names, o.Optimizer)
	}
	return names
}
