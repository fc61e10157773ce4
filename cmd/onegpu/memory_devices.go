package main

import (
	"fmt"
	"io"

	"github.com/onegpu/onegpu/analysis"
	"github.com/onegpu/onegpu/train"
)

// devicesJSON is what `onegpu memory --devices N` adds: what one device holds next to the
// single-device figures.
type devicesJSON struct {
	Count int    `json:"count"`
	Shard string `json:"shard"`
	// StateTotal is the whole training state by kind; StatePerDevice what one device holds of it
	// (exact: the shapes of the variables' shards).
	StateTotal     train.StateBytes `json:"state_total"`
	StatePerDevice train.StateBytes `json:"state_per_device"`
	// SingleDeviceBreakdown is the one-device step's breakdown at its peak; the report's
	// breakdown_at_peak is then one device's share of it.
	SingleDeviceBreakdown map[string]int64 `json:"single_device_breakdown_at_peak"`
	// XLAPerDevice is XLA's memory account of the partitioned step, for one device; the report's
	// xla_compiled is the single-device step's.
	XLAPerDevice *compiledJSON `json:"xla_compiled_per_device"`
}

// addDevices compiles the step partitioned across the configured devices and replaces the
// breakdown at the peak by what one device holds of it.
func (r *memoryReport) addDevices(trainer *train.Trainer) error {
	dp, err := trainer.DeviceProgram()
	if err != nil {
		return err
	}
	defer dp.Program.Graph.Finalize()
	c := dp.Compiled
	d := &devicesJSON{Count: dp.Devices.Count, Shard: dp.Devices.Shard.String(), StateTotal: dp.Total, StatePerDevice: dp.PerDevice,
		SingleDeviceBreakdown: r.Breakdown,
		XLAPerDevice: &compiledJSON{ArgumentBytes: c.ArgumentBytes, OutputBytes: c.OutputBytes, AliasBytes: c.AliasBytes,
			TemporaryBytes: c.TemporaryBytes, CodeBytes: c.CodeBytes, TotalBytes: c.TotalBytes()}}
	whole := map[analysis.Kind]int64{}
	for _, k := range analysis.Kinds() {
		whole[k] = r.breakdownByKind[k]
	}
	perDevice := dp.PerDeviceBreakdown(whole)
	for _, k := range analysis.Kinds() {
		r.breakdownByKind[k] = perDevice[k]
	}
	r.Breakdown = breakdownJSON(r.breakdownByKind)
	r.Devices = d
	return nil
}

// writeText prints the per-device figures next to the single-device ones; nothing for one device.
func (d *devicesJSON) writeText(w io.Writer) {
	if d == nil {
		return
	}
	fmt.Fprintf(w, "on %d devices, --shard %s (XLA's SPMD partitioner), one device holds:\n", d.Count, d.Shard)
	fmt.Fprintf(w, "  %-22s %12s %12s %7s\n", "", "one device", "of 1 device", "ratio")
	row := func(name string, part, whole int64) {
		fmt.Fprintf(w, "  %-22s %12s %12s %6.2fx\n", name, analysis.FormatBytes(part), analysis.FormatBytes(whole), float64(part)/float64(max(whole, 1)))
	}
	row("parameters", d.StatePerDevice.Params, d.StateTotal.Params)
	if d.StateTotal.FrozenWeights > 0 {
		row("frozen weights", d.StatePerDevice.FrozenWeights, d.StateTotal.FrozenWeights)
	}
	row("optimizer state", d.StatePerDevice.OptimizerState, d.StateTotal.OptimizerState)
	row("other state", d.StatePerDevice.Other, d.StateTotal.Other)
	fmt.Fprintf(w, "XLA compiled, per device: %s = arguments %s + outputs %s - aliased %s + temporary %s + code %s\n",
		analysis.FormatBytes(d.XLAPerDevice.TotalBytes), analysis.FormatBytes(d.XLAPerDevice.ArgumentBytes), analysis.FormatBytes(d.XLAPerDevice.OutputBytes),
		analysis.FormatBytes(d.XLAPerDevice.AliasBytes), analysis.FormatBytes(d.XLAPerDevice.TemporaryBytes), analysis.FormatBytes(d.XLAPerDevice.CodeBytes))
	fmt.Fprintf(w, "(the breakdown below is one device's share of the single-device estimate: weights and optimizer state by\n"+
		" their shards, gradients like the weights under --shard params, activations by the batch split)\n\n")
}
