package train

import (
	"fmt"
	"strings"

	"github.com/gomlx/gomlx/backends"

	"github.com/onegpu/onegpu/platform"
)

// Shard says which training state is split across devices instead of copied onto each.
type Shard int

const (
	// ShardNone replicates parameters, gradients and optimizer state: plain data parallelism.
	ShardNone Shard = iota
	// ShardOptimizer splits the optimizer state (Adam's moments) across devices (ZeRO-1).
	ShardOptimizer
	// ShardParams splits parameters, gradients and optimizer state (FSDP, ZeRO-3).
	ShardParams
)

var shardNames = []string{"none", "optimizer", "params"}

// String returns the mode's name as --shard spells it.
func (s Shard) String() string {
	if s < 0 || int(s) >= len(shardNames) {
		return fmt.Sprintf("Shard(%d)", int(s))
	}
	return shardNames[s]
}

// ParseShard reads "none" (or ""), "optimizer" or "params".
func ParseShard(s string) (Shard, error) {
	if s == "" {
		return ShardNone, nil
	}
	for i, name := range shardNames {
		if s == name {
			return Shard(i), nil
		}
	}
	return ShardNone, fmt.Errorf("unknown shard mode %q: use none (replicate everything), optimizer (ZeRO-1) or params (FSDP)", s)
}

// Devices says how many devices of the backend a train step runs on, and what they share. The
// step is written once for the whole (global) batch; XLA's SPMD partitioner (Shardy, through
// GoMLX's AutoSharding) splits the batch across the devices and inserts the collectives: the
// all-reduce of the gradients, and for sharded state the all-gathers and reduce-scatters.
//
// Count counts devices of the whole job. Today all of them belong to one process (one PJRT
// client); a multi-process launch would add fields saying which of them this process feeds,
// leaving the meaning of Count, Shard and the global Config.Batch unchanged.
type Devices struct {
	// Count is the number of devices; 0 and 1 mean one device, without partitioning.
	Count int
	// Shard is what is split across the devices rather than replicated.
	Shard Shard
}

// Distributed reports whether the step is partitioned across more than one device.
func (d Devices) Distributed() bool { return d.Count > 1 }

// MeshAxis is the name of the device mesh's only axis: devices split the batch along it, and
// sharded variables their first divisible axis.
const MeshAxis = "data"

// validate checks the devices against the batch, before any work: every device gets the same
// number of examples, split into the same number of micro-batches.
func (d Devices) validate(batch, microBatches int) error {
	if d.Count < 0 {
		return fmt.Errorf("Config.Devices.Count %d: the number of devices must be at least 1", d.Count)
	}
	if d.Shard < ShardNone || d.Shard > ShardParams {
		return fmt.Errorf("unknown shard mode %d: use none, optimizer or params", int(d.Shard))
	}
	if !d.Distributed() {
		if d.Shard != ShardNone {
			return fmt.Errorf("Config.Devices.Shard %s needs several devices: set Config.Devices.Count N (N > 1) or use Config.Devices.Shard none", d.Shard)
		}
		return nil
	}
	if batch%d.Count != 0 {
		return fmt.Errorf("Config.Devices.Count %d: a batch of %d does not split across %d devices: choose a batch that is a multiple of %d (e.g. %d)",
			d.Count, batch, d.Count, d.Count, (batch/d.Count+1)*d.Count)
	}
	if perDevice := batch / d.Count; perDevice%microBatches != 0 {
		return fmt.Errorf("Config.Devices.Count %d with Config.MicroBatches %d: each device gets %d examples of the batch of %d, which do not split into %d micro-batches: use a batch that is a multiple of %d",
			d.Count, microBatches, perDevice, batch, microBatches, d.Count*microBatches)
	}
	return nil
}

// CheckBackend returns an error unless backend has at least Count devices; it names the embedded
// backend's limit and what to use instead.
func (d Devices) CheckBackend(backend backends.Backend) error {
	if !d.Distributed() {
		return nil
	}
	have := backend.NumDevices()
	if have >= d.Count {
		return nil
	}
	if !strings.HasPrefix(backend.Name(), "xla") {
		return fmt.Errorf("Config.Devices.Count %d: the embedded backend (%s) has %d device and cannot partition a step: use an XLA PJRT plugin (the backend xla:/abs/path/plugin.so, or $%s; the XLA CPU plugin exposes 4 devices)",
			d.Count, backend.Name(), have, platform.EnvPlugin)
	}
	return fmt.Errorf("Config.Devices.Count %d: the backend %s has only %d device(s): use Config.Devices.Count %d or fewer", d.Count, backend.Name(), have, have)
}
