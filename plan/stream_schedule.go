package plan

// The streamed step's time as the executor schedules it (train's streamPass and hostRun): the
// stage instances one after the other on the device, each one's weights arriving while the one
// before computes, and the host updating each backward instance while the device goes on.

// uploads is how many times a step sends st's weights to the device: for its forward and its
// backward program, once for the head's one program or a stage nothing in trains (no backward).
func uploads(st StageEstimate) int {
	if st.Name == "head" || st.Params == 0 {
		return 1
	}
	return 2
}

// instanceTime is a stage instance's run in the streamed step, in seconds: its upload, its
// programs' compute (every micro-batch's), its gradients' download and its host update (0 in the
// forward pass).
type instanceTime struct {
	upload, compute, download, host float64
}

// scheduleOf lists the step's stage instances in the order the streamed executor binds them
// (the embedding, the blocks, the head, the blocks from the last, the embedding when it trains:
// train's bindOrder), with their times at secondsPerFLOP (a micro-batch's FLOPs times the
// micro-batches) and o's rates.
func scheduleOf(stages []StageEstimate, secondsPerFLOP float64, o StreamOptions) []instanceTime {
	embed, block, head := stages[0], stages[1], stages[2]
	up := func(st StageEstimate) float64 { return float64(st.BusBytes) / o.Bandwidth }
	forward := func(st StageEstimate) instanceTime {
		return instanceTime{upload: up(st), compute: float64(st.FLOPs-st.BackwardFLOPs) * secondsPerFLOP}
	}
	backward := func(st StageEstimate) instanceTime {
		own := float64(st.Params - st.SharedParams)
		return instanceTime{upload: up(st), compute: float64(st.BackwardFLOPs) * secondsPerFLOP,
			download: 4 * own / o.Bandwidth, host: own / o.HostRate}
	}
	order := []instanceTime{forward(embed)}
	for range block.Count {
		order = append(order, forward(block))
	}
	order = append(order, backward(head))
	for range block.Count {
		order = append(order, backward(block))
	}
	if embed.Params > 0 {
		order = append(order, backward(embed))
	}
	return order
}

// stepSchedule is the step's time when the executor runs instances in order: the device computes
// an instance while the next one's weights arrive (the first's arrive alone), the gradients of a
// backward instance go to the host after its compute, and the host updates an instance once its
// gradients are there and the host is done with the one before, while the device goes on (serial:
// the host starts after the device's last instance, Config.SerialHostUpdate). The device waits for
// each download: the executor overlaps it with the next instance only when the budget has room
// for a second stage's gradient sums, which the device estimate does not count (a plan's answer
// runs at its own budget), so the time is the one at that budget.
func stepSchedule(instances []instanceTime, serial bool) float64 {
	device := instances[0].upload
	var ready []float64 // when each backward instance's gradients are on the host
	var hosts []float64
	for i, in := range instances {
		next := 0.0
		if i+1 < len(instances) {
			next = instances[i+1].upload
		}
		done := device + in.compute + in.download
		device = max(done, device+next)
		if in.host > 0 || in.download > 0 {
			ready, hosts = append(ready, done), append(hosts, in.host)
		}
	}
	end := device
	host := 0.0
	for i, at := range ready {
		if serial {
			at = device
		}
		host = max(host, at) + hosts[i]
	}
	return max(end, host)
}
