package flags

import "strings"

// replacement says what to write instead of a flag a newer build removed or deprecated.
type replacement struct {
	flag string // the flag that took over, or "" when none did
	note string // what changed, in one clause
}

func (r replacement) fix() string {
	if r.flag == "" || strings.Contains(r.note, "--"+r.flag) {
		return "drop it: " + r.note
	}
	return "drop it: " + r.note + "; see --" + r.flag
}

// replacements holds what onegpu knows of flags that XLA removed or deprecated between the
// builds it has tables for. Which build removed a flag comes from the tables; this map only
// adds what replaced it, where XLA's changes say so.
var replacements = map[string]replacement{
	"xla_gpu_enable_async_collectives": {"xla_gpu_disable_async_collectives",
		"collectives are asynchronous by default now; list the ones to keep synchronous, e.g. --xla_gpu_disable_async_collectives=ALLREDUCE"},
	"xla_gpu_enable_async_all_reduce": {"xla_gpu_disable_async_collectives",
		"all-reduce is asynchronous by default now; --xla_gpu_disable_async_collectives=ALLREDUCE makes it synchronous"},
	"xla_gpu_enable_async_all_gather": {"xla_gpu_disable_async_collectives",
		"all-gather is asynchronous by default now; --xla_gpu_disable_async_collectives=ALLGATHER makes it synchronous"},
	"xla_gpu_enable_async_reduce_scatter": {"xla_gpu_disable_async_collectives",
		"reduce-scatter is asynchronous by default now; --xla_gpu_disable_async_collectives=REDUCESCATTER makes it synchronous"},
	"xla_gpu_enable_async_all_to_all": {"xla_gpu_disable_async_collectives",
		"all-to-all is asynchronous by default now; --xla_gpu_disable_async_collectives=ALLTOALL makes it synchronous"},
	"xla_gpu_enable_async_collective_permute": {"xla_gpu_disable_async_collectives",
		"collective-permute is asynchronous by default now; --xla_gpu_disable_async_collectives=COLLECTIVEPERMUTE makes it synchronous"},
	"xla_gpu_enable_triton_softmax_fusion": {"",
		"XLA's priority fusion now forms Triton softmax fusions itself, with no flag to ask for them"},
	"xla_gpu_enable_priority_fusion": {"", "priority fusion is always on"},
	"xla_gpu_enable_mlir_emitters":   {"", "the MLIR emitters are always on"},
	"xla_gpu_graph_level": {"xla_gpu_enable_command_buffer",
		"command buffers are chosen by kind: level 0 is --xla_gpu_enable_command_buffer= (none), 1 is FUSION, 2 is FUSION,CUBLAS, 3 is FUSION,CUBLAS,CUDNN"},
	"xla_gpu_enable_pipelined_collectives": {"xla_gpu_enable_pipelined_all_reduce",
		"it was split into --xla_gpu_enable_pipelined_all_reduce, --xla_gpu_enable_pipelined_all_gather and --xla_gpu_enable_pipelined_reduce_scatter"},
	"xla_gpu_enable_pipelined_all_reduce":     {"xla_gpu_pipeline_all_reduce", "a pipelining mode replaces the bool"},
	"xla_gpu_enable_pipelined_all_gather":     {"xla_gpu_pipeline_all_gather", "a pipelining mode replaces the bool"},
	"xla_gpu_enable_pipelined_reduce_scatter": {"xla_gpu_pipeline_reduce_scatter", "a pipelining mode replaces the bool"},
	"xla_cpu_use_mkl_dnn":                     {"xla_cpu_use_onednn", "MKL-DNN is called oneDNN now"},
}
