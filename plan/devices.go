package plan

import (
	"fmt"
	"slices"
	"sort"

	"github.com/gomlx/gomlx/backends"

	"github.com/onegpu/onegpu/analysis"
	"github.com/onegpu/onegpu/train"
)

// DeviceCandidate is one configuration SearchDevices considered: a variant of the grid on some
// devices, with one device's share of its memory.
type DeviceCandidate struct {
	Variant
	Devices int    `json:"devices"`
	Shard   string `json:"shard"`
	// PerDeviceBytes is what one device holds at the step's peak: the one-device estimate's
	// breakdown, each kind scaled by its share (train.Devices.Share).
	PerDeviceBytes int64 `json:"per_device_bytes"`
	// Seconds is the step's compute time: FLOPs split evenly over the devices at the assumed
	// throughput. The collectives' time is not in it.
	Seconds float64 `json:"estimated_step_seconds"`
	Fits    bool    `json:"fits"`
}

// Config returns base with the candidate's variant and devices applied, validated.
func (c DeviceCandidate) Config(base train.Config) (train.Config, error) {
	config, err := c.Variant.Apply(base)
	if err != nil {
		return config, err
	}
	shard, err := train.ParseShard(c.Shard)
	if err != nil {
		return config, err
	}
	config.Devices = train.Devices{Count: c.Devices, Shard: shard}
	return config, config.Validate()
}

// DeviceCounts are the device counts SearchDevices tries for up to maxDevices devices: every
// count from 1 to maxDevices that divides the batch, in increasing order. It tries divisors up
// to the batch's square root, so a huge maxDevices costs nothing.
func DeviceCounts(maxDevices, batch int) []int {
	var small, large []int
	for n := 1; n <= batch/n; n++ {
		if batch%n != 0 {
			continue
		}
		if n <= maxDevices {
			small = append(small, n)
		}
		if other := batch / n; other != n && other <= maxDevices {
			large = append(large, other)
		}
	}
	slices.Reverse(large)
	return append(small, large...)
}

// SearchDevices is Search across 1 to maxDevices devices: every variant of SearchGrid on every
// count of DeviceCounts, with each shard mode on more than one device. The memory of a candidate
// is per device, from the sequential-execution estimate of the one-device step: each variant is
// built once on backend (the embedded one is the quickest; the estimate does not depend on it) and
// nothing is compiled or run, so the devices need not exist. Candidates
// come back sorted by estimated step time, then by memory per device; a variant whose
// micro-batches do not split a device's share of the batch is left out.
func SearchDevices(backend backends.Backend, base train.Config, budget int64, rate Throughput, maxDevices int) ([]DeviceCandidate, error) {
	if maxDevices < 1 {
		return nil, fmt.Errorf("%d devices: plan for at least 1", maxDevices)
	}
	base.Devices = train.Devices{}
	single, err := Search(backend, base, budget, rate, false)
	if err != nil {
		return nil, err
	}
	var rows []DeviceCandidate
	for _, one := range single {
		for _, n := range DeviceCounts(maxDevices, base.Batch) {
			shards := []train.Shard{train.ShardNone, train.ShardOptimizer, train.ShardParams}
			if n == 1 {
				shards = shards[:1]
			}
			for _, shard := range shards {
				c := DeviceCandidate{Variant: one.Variant, Devices: n, Shard: shard.String(), Seconds: one.Seconds / float64(n)}
				if _, err := c.Config(base); err != nil {
					continue // the micro-batches do not split a device's share of the batch
				}
				c.PerDeviceBytes = perDevice(one.Estimate, train.Devices{Count: n, Shard: shard})
				c.Fits = c.PerDeviceBytes <= budget
				rows = append(rows, c)
			}
		}
	}
	sort.SliceStable(rows, func(i, j int) bool {
		if rows[i].Seconds != rows[j].Seconds {
			return rows[i].Seconds < rows[j].Seconds
		}
		return rows[i].PerDeviceBytes < rows[j].PerDeviceBytes
	})
	return rows, nil
}

// perDevice is one device's share of an estimated step's peak.
func perDevice(e Estimate, d train.Devices) int64 {
	var total float64
	for _, k := range analysis.Kinds() {
		total += float64(e.Breakdown[k]) * d.Share(k)
	}
	return int64(total)
}

// ByFewestDevices returns the indices of the candidates that fit, fewest devices first, then
// fastest: the first is the plan's answer. rows must be sorted as SearchDevices returns them.
func ByFewestDevices(rows []DeviceCandidate) []int {
	var fits []int
	for i, r := range rows {
		if r.Fits {
			fits = append(fits, i)
		}
	}
	sort.SliceStable(fits, func(a, b int) bool { return rows[fits[a]].Devices < rows[fits[b]].Devices })
	return fits
}

// FastestOn returns the fastest candidate that fits on exactly n devices, or -1.
func FastestOn(rows []DeviceCandidate, n int) int {
	for i, r := range rows {
		if r.Fits && r.Devices == n {
			return i
		}
	}
	return -1
}
