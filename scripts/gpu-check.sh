#!/usr/bin/env bash
# gpu-check.sh: onegpu next to JAX on a GPU machine, in about 10 minutes, everything logged under $OUT.
#
# Run from the repository root, with the binary built beforehand on a machine with Go:
#
#     go build -o bin/onegpu ./cmd/onegpu        # then carry bin/ to the GPU machine
#     OUT=/some/folder scripts/gpu-check.sh      # DRY_RUN=1 prints the commands instead
#
# What it runs, each under its own `timeout`, logging and going on when one fails:
#   1. nvidia-smi, the JAX install (versions, devices), onegpu env
#   2. onegpu flags: the tutorial's five XLA_FLAGS checked against the CUDA plugin's XLA build
#      (three no longer exist: the check is expected to fail and say why), and what the presets
#      single-gpu-training and legacy-2024 hand to XLA
#   3. onegpu compare on the tutorial's GPT (155,877,376 parameters, batch 64×512, 5 steps, dropout
#      0): bfloat16 + remat of MLP and attention + 4 micro-batches (the tutorial's setup) first
#   4. onegpu compare on Llama-3.2-1B (1,235,814,400 parameters, one sequence of 2048 a step,
#      bfloat16 compute, remat of whole layers): onegpu and the Flax Llama of reference/jax/models.py
#      from the same weights, a few steps: losses, tokens/s and XLA's compiled memory side by side
#   4b. onegpu memory of the tutorial's step on XLA (XLA's compiled account next to onegpu's estimate)
#   5. the tutorial's GPT with 8-bit Adam and with the optimizer offloaded to the host: memory
#      (--json: breakdown_at_peak, xla_compiled, host) and 4 train steps each (--json: step time and,
#      offloaded, the bytes moved per step and their time under "offload")
#   6. long sequences: the Llama-3.2-1B preset at sequence 8192 (batch 1, bfloat16 compute, remat
#      block), plain vs chunked attention and cross-entropy: memory (--json: xla_compiled, the peak
#      XLA plans for) and 4 train steps each (--json: compile_seconds, step_seconds, tokens_per_second);
#      chunked also staged (--offload staged: the step a stage at a time, everything on the GPU;
#      --json's offload.device_peak_bytes is its largest footprint by XLA's account)
#   6b. adapters: Llama-3.2-1B fine-tuned fully (whole and staged), with LoRA (rank 16, every
#      projection, bf16 base) and with QLoRA (NF4 base), the same run (sequence 2048, batch 2, bf16,
#      remat block, chunked loss): memory --json (XLA's compiled total next to the estimate) and 6
#      train steps each (tokens/s)
#   7. onegpu compare: float32 without remat, bfloat16 without remat, the MLP — while time is left;
#      then, compile only, Llama-3.1-8B LoRA and QLoRA (issue 36's figure: memory --json)
#   Every compare table (and its JSON) holds both sides' aliased bytes and the census of the
#   optimized HLO (converts, dots by operand types, fusions, copies, transposes, loops); memory
#   prints onegpu's census: the GPU run tells the same story as `onegpu compare` on CPU.
#
# Environment (all optional):
#   OUT           where logs and JSON go (default ./out/gpu-check)
#   ONEGPU        the onegpu binary (default bin/onegpu)
#   PYTHON        the Python with jax, flax and optax (default python3)
#   PLUGIN        the CUDA PJRT plugin (default: xla_cuda_plugin.so found under / by find)
#   CUDA_DIR      CUDA's folder for --xla_gpu_cuda_data_dir (default: $CUDA_HOME, /usr/local/cuda
#                 or the folder above ptxas's)
#   BUDGET_S      wall-clock budget of the whole script in seconds (default 540): a step that would
#                 not fit in what is left is skipped, and its timeout is cut to what is left
#   STEPS         train steps per compare configuration (default 5)
#   HOST_PLUGIN   the XLA CPU PJRT plugin the streamed run's host update runs on (default: found
#                 in the Python's site-packages, pip install lammps-jax-pjrt-cpu; else the embedded
#                 backend updates, slower)
#   DRY_RUN=1     print the commands, run nothing (no GPU needed; for checking the script)
#
# Everything the script prints is also in $OUT/gpu-check.log; each step writes $OUT/NN-name.log
# and the compare steps $OUT/NN-name.json (onegpu compare --json-file). The exit status is 0 when
# every step ran and succeeded, 1 otherwise; $OUT/summary.txt lists each step's status.

set -u
set -o pipefail

OUT=${OUT:-out/gpu-check}
ONEGPU=${ONEGPU:-bin/onegpu}
PYTHON=${PYTHON:-python3}
BUDGET_S=${BUDGET_S:-540}
STEPS=${STEPS:-5}
DRY_RUN=${DRY_RUN:-0}

mkdir -p "$OUT"
LOG="$OUT/gpu-check.log"
SUMMARY="$OUT/summary.txt"
: >"$SUMMARY"
exec > >(tee -a "$LOG") 2>&1

START=$(date +%s)
FAILURES=0
STEP_NO=0

say() { printf '[gpu-check %4ss] %s\n' "$(($(date +%s) - START))" "$*"; }

# run NAME TIMEOUT_S CMD...: runs CMD under timeout, output to the log and $OUT/NN-NAME.log;
# records the status; never exits the script.
run() {
	local name=$1 limit=$2
	shift 2
	STEP_NO=$((STEP_NO + 1))
	local tag
	tag=$(printf '%02d-%s' "$STEP_NO" "$name")
	local left=$((BUDGET_S - ($(date +%s) - START)))
	if [ "$DRY_RUN" = 1 ]; then
		say "[$tag] (timeout ${limit}s) $(printf '%q ' "$@")"
		echo "$tag dry-run" >>"$SUMMARY"
		return 0
	fi
	if [ "$left" -lt 20 ]; then
		say "[$tag] SKIPPED: ${left}s of the ${BUDGET_S}s budget left"
		echo "$tag skipped (budget)" >>"$SUMMARY"
		return 0
	fi
	if [ "$limit" -gt "$left" ]; then
		limit=$left
	fi
	say "[$tag] start (timeout ${limit}s): $(printf '%q ' "$@")"
	local t0 rc
	t0=$(date +%s)
	timeout --kill-after=10 "$limit" "$@" 2>&1 | tee "$OUT/$tag.log"
	rc=${PIPESTATUS[0]}
	local took=$(($(date +%s) - t0))
	case $rc in
	0) say "[$tag] ok in ${took}s" ;;
	124 | 137) say "[$tag] TIMED OUT after ${took}s (limit ${limit}s)" ;;
	*) say "[$tag] FAILED with status $rc after ${took}s" ;;
	esac
	echo "$tag rc=$rc ${took}s" >>"$SUMMARY"
	if [ "$rc" != 0 ]; then
		FAILURES=$((FAILURES + 1))
	fi
	return 0
}

# expect_fail NAME TIMEOUT_S CMD...: like run, for a command whose documented answer is status 1.
expect_fail() {
	local name=$1 limit=$2
	shift 2
	STEP_NO=$((STEP_NO + 1))
	local tag
	tag=$(printf '%02d-%s' "$STEP_NO" "$name")
	if [ "$DRY_RUN" = 1 ]; then
		say "[$tag] (timeout ${limit}s, status 1 expected) $(printf '%q ' "$@")"
		echo "$tag dry-run" >>"$SUMMARY"
		return 0
	fi
	say "[$tag] start (status 1 expected): $(printf '%q ' "$@")"
	timeout "$limit" "$@" 2>&1 | tee "$OUT/$tag.log"
	local rc=${PIPESTATUS[0]}
	if [ "$rc" = 1 ]; then
		say "[$tag] ok: status 1 as expected"
	else
		say "[$tag] UNEXPECTED status $rc"
		FAILURES=$((FAILURES + 1))
	fi
	echo "$tag rc=$rc (1 expected)" >>"$SUMMARY"
	return 0
}

say "onegpu GPU check; output under $OUT; budget ${BUDGET_S}s; dry run: $DRY_RUN"

# --- what is on the machine -------------------------------------------------------------------
if [ ! -x "$ONEGPU" ] && [ "$DRY_RUN" != 1 ]; then
	say "no onegpu binary at $ONEGPU: build it first (go build -o bin/onegpu ./cmd/onegpu) and carry bin/"
	echo "binary missing" >>"$SUMMARY"
	exit 1
fi

if [ -z "${PLUGIN:-}" ]; then
	if [ "$DRY_RUN" = 1 ]; then
		PLUGIN=/path/to/jax_plugins/xla_cuda13/xla_cuda_plugin.so
	else
		# Prefer the plugin of the Python we run JAX with; fall back to a search of the disk.
		PLUGIN=$("$PYTHON" - <<'EOF' 2>/dev/null
import glob, os, site
roots = site.getsitepackages() + [site.getusersitepackages()]
hits = [p for r in roots for p in glob.glob(os.path.join(r, "**", "xla_cuda_plugin.so"), recursive=True)]
print(sorted(hits)[0] if hits else "")
EOF
		)
		if [ -z "$PLUGIN" ]; then
			PLUGIN=$(find / -name xla_cuda_plugin.so -not -path '/proc/*' 2>/dev/null | head -n 1)
		fi
	fi
fi
if [ -z "$PLUGIN" ]; then
	say "no xla_cuda_plugin.so found (jax-cuda13-pjrt installed?): only the JAX side can run"
	echo "plugin missing" >>"$SUMMARY"
	FAILURES=$((FAILURES + 1))
fi
say "CUDA PJRT plugin: ${PLUGIN:-none}"

if [ -z "${HOST_PLUGIN:-}" ] && [ "$DRY_RUN" != 1 ]; then
	HOST_PLUGIN=$("$PYTHON" - <<'EOF' 2>/dev/null
import glob, os, site
roots = site.getsitepackages() + [site.getusersitepackages()]
hits = [p for r in roots for p in glob.glob(os.path.join(r, "**", "pjrt_c_api_cpu_plugin.so"), recursive=True)]
print(sorted(hits)[0] if hits else "")
EOF
	)
fi
say "CPU PJRT plugin for the streamed run's host update: ${HOST_PLUGIN:-none (the embedded backend updates)}"

if [ -z "${CUDA_DIR:-}" ]; then
	for candidate in "${CUDA_HOME:-}" /usr/local/cuda "$(dirname "$(dirname "$(command -v ptxas 2>/dev/null || echo /nonexistent/bin/ptxas)")")"; do
		if [ -n "$candidate" ] && [ -d "$candidate/nvvm/libdevice" ]; then
			CUDA_DIR=$candidate
			break
		fi
	done
fi
say "CUDA folder for --xla_gpu_cuda_data_dir: ${CUDA_DIR:-not found (XLA searches its defaults)}"

export ONEGPU_PJRT_PLUGIN="$PLUGIN"
export GOMLX_NO_AUTO_INSTALL=1
# go-xla v0.1.4 would append its author's --xla_gpu_cuda_data_dir to XLA_FLAGS; the folder of this
# machine is passed instead, once onegpu's validator accepts the flag for the plugin's build.
export GOPJRT_CUDA_CHECKS=0
export TF_CPP_MIN_LOG_LEVEL=${TF_CPP_MIN_LOG_LEVEL:-1}

run nvidia-smi 20 nvidia-smi
run jax-install 60 "$PYTHON" -c 'import jax, jaxlib, flax, optax; print("jax", jax.__version__, "jaxlib", jaxlib.__version__, "flax", flax.__version__, "optax", optax.__version__); print(jax.devices())'
run onegpu-env 30 "$ONEGPU" env

if [ -n "${CUDA_DIR:-}" ]; then
	if [ "$DRY_RUN" = 1 ] || "$ONEGPU" flags check "--xla_gpu_cuda_data_dir=$CUDA_DIR" >/dev/null 2>&1; then
		export XLA_FLAGS="${XLA_FLAGS:+$XLA_FLAGS }--xla_gpu_cuda_data_dir=$CUDA_DIR"
		say "XLA_FLAGS=$XLA_FLAGS (onegpu and JAX both read it)"
	else
		say "onegpu's validator does not accept --xla_gpu_cuda_data_dir for this plugin; XLA_FLAGS left as is"
	fi
fi

# --- flags ----------------------------------------------------------------------------------
TUTORIAL_FLAGS="--xla_gpu_enable_triton_softmax_fusion=true --xla_gpu_triton_gemm_any=false --xla_gpu_enable_async_collectives=true --xla_gpu_enable_latency_hiding_scheduler=true --xla_gpu_enable_highest_priority_async_stream=true"
expect_fail flags-check-tutorial 30 "$ONEGPU" flags check "$TUTORIAL_FLAGS"
run flags-presets 30 "$ONEGPU" flags --preset single-gpu-training --preset legacy-2024

# --- side by side ---------------------------------------------------------------------------
# Tolerances: bfloat16 keeps compare's default (1e-2). float32 is loosened from 1e-5 to 1e-4: on
# an H200, XLA's default precision may run float32 matmuls on TF32 tensor cores (on both sides),
# and cuBLAS/Triton choices differ between the two programs. --jax-runtime own: JAX's own CUDA
# plugin is the file onegpu loads, so both sides already share one runtime.
compare() {
	local name=$1 limit=$2 config=$3 json
	json="$OUT/$(printf '%02d' $((STEP_NO + 1)))-$name.json"
	run "$name" "$limit" "$ONEGPU" compare --steps "$STEPS" --backend "xla:$PLUGIN" --python "$PYTHON" \
		--jax-runtime own --tol-f32 1e-4 --json-file "$json" --config "$config"
}

BF16="--policy params=float32,compute=bfloat16,output=float32"
compare compare-tutorial-bf16-remat 240 "--model gpt --preset tutorial $BF16 --remat mlp,attn --microbatches 4"
# --- a Llama (issue 25): Llama-3.2-1B from the same random weights on both sides -----------------
# One sequence of 2048 tokens a step in one micro-batch keeps both compiles short; the table holds
# tokens/s and XLA's compiled memory (arguments, aliased, temporaries, total) of each side, and
# JAX's peak_memory_in_bytes. The export of 4.9 GB of float32 weights for JAX takes ~20 s of it.
compare compare-llama1b-bf16 300 "--model llama --preset llama-3.2-1b $BF16 --remat block --batch 1 --microbatches 1"
run memory-tutorial 120 "$ONEGPU" memory --model gpt --preset tutorial --backend "xla:$PLUGIN"
# --- optimizer state: 8-bit Adam and host offload on the tutorial's GPT ------------------------
run memory-tutorial-adam8bit 120 "$ONEGPU" memory --model gpt --preset tutorial --backend "xla:$PLUGIN" --optimizer adam8bit --json
run memory-tutorial-offload 120 "$ONEGPU" memory --model gpt --preset tutorial --backend "xla:$PLUGIN" --offload optimizer --json
run train-tutorial-adam 150 "$ONEGPU" train --model gpt --preset tutorial --backend "xla:$PLUGIN" --data synthetic --steps 4 --json
run train-tutorial-adam8bit 150 "$ONEGPU" train --model gpt --preset tutorial --backend "xla:$PLUGIN" --data synthetic --steps 4 --optimizer adam8bit --json
run train-tutorial-offload 180 "$ONEGPU" train --model gpt --preset tutorial --backend "xla:$PLUGIN" --data synthetic --steps 4 --offload optimizer --json
# --- long sequences: Llama-3.2-1B at sequence 8192, plain vs chunked attention and loss ----------
# Plain attention holds heads × 8192² float32 scores of a layer and the loss 8192 × 128256 float32
# logits (and their gradients); chunked holds blocks of each, so its peak is far lower at a step
# time close to plain's (on XLA CPU at sequence 2048: within 1.3x).
LONG=(--model llama --preset llama-3.2-1b --seq 8192 --batch 1 --microbatches 1 --remat block
	--policy params=float32,compute=bfloat16,output=float32 --backend "xla:$PLUGIN")
CHUNKED=(--attention chunked --cross-entropy chunked)
run memory-llama1b-seq8192-plain 150 "$ONEGPU" memory "${LONG[@]}" --json
run memory-llama1b-seq8192-chunked 300 "$ONEGPU" memory "${LONG[@]}" "${CHUNKED[@]}" --json
run train-llama1b-seq8192-plain 200 "$ONEGPU" train "${LONG[@]}" --data synthetic --steps 4 --json
run train-llama1b-seq8192-chunked 360 "$ONEGPU" train "${LONG[@]}" "${CHUNKED[@]}" --data synthetic --steps 4 --json
# The same run staged (issue 37): one forward and one backward program per kind of stage, every
# weight, gradient and Adam state on the GPU; --json: compile_seconds (the whole step unrolls 16
# layers of 36 attention block pairs, the staged programs one), tokens_per_second, and under
# "offload" the largest device footprint by XLA's account (device_peak_bytes).
run train-llama1b-seq8192-chunked-staged 300 "$ONEGPU" train "${LONG[@]}" "${CHUNKED[@]}" --offload staged --data synthetic --steps 4 --json
# --- adapters (issue 36): full, LoRA and QLoRA fine-tunes of Llama-3.2-1B, the same run ------------
# Sequences of 2048, batch 2, bfloat16 compute, remat of whole layers, the chunked loss; LoRA rank 16
# on every projection over a bfloat16 base, QLoRA the same over an NF4 base (quantized once from the
# seed's weights). memory --json: XLA's compiled account (xla_compiled.total_bytes) next to onegpu's
# estimate (peak_bytes); train --json: tokens_per_second of the steps after the first.
ADAPT=(--model llama --preset llama-3.2-1b --seq 2048 --batch 2 --microbatches 1 --remat block --cross-entropy chunked
	--policy params=float32,compute=bfloat16,output=float32 --backend "xla:$PLUGIN")
LORA=(--lora rank=16,alpha=32,targets=q,k,v,o,gate,up,down --base-dtype bfloat16)
run memory-llama1b-full 150 "$ONEGPU" memory "${ADAPT[@]}" --json
run memory-llama1b-lora 150 "$ONEGPU" memory "${ADAPT[@]}" "${LORA[@]}" --json
run memory-llama1b-qlora 150 "$ONEGPU" memory "${ADAPT[@]}" "${LORA[@]}" --quantize-base nf4 --json
run train-llama1b-full 200 "$ONEGPU" train "${ADAPT[@]}" --data synthetic --steps 6 --json
run train-llama1b-full-staged 200 "$ONEGPU" train "${ADAPT[@]}" --offload staged --data synthetic --steps 6 --json
run train-llama1b-lora 200 "$ONEGPU" train "${ADAPT[@]}" "${LORA[@]}" --data synthetic --steps 6 --json
run train-llama1b-qlora 240 "$ONEGPU" train "${ADAPT[@]}" "${LORA[@]}" --quantize-base nf4 --data synthetic --steps 6 --json
# --- beyond the device: the weights streamed from host memory (--offload params) ----------------
# --budget 4GiB stands in for a GPU smaller than the model (this machine's host memory, not its
# GPU, bounds what fits: the H200's 139 GiB exceed the host's 128 GiB): every stage program's
# memory by XLA's account plus the buffers kept on the device stay under it, or the run stops.
run train-llama-1b-streamed 240 env ${HOST_PLUGIN:+ONEGPU_HOST_PJRT_PLUGIN="$HOST_PLUGIN"} "$ONEGPU" train --model llama --preset llama-3.2-1b \
	--backend "xla:$PLUGIN" --data synthetic --seq 1024 --batch 4 --microbatches 2 --steps 3 --offload params --budget 4GiB --remat block --cross-entropy chunked --json
compare compare-tutorial-f32 200 "--model gpt --preset tutorial --policy float32 --remat none --microbatches 4"
compare compare-tutorial-bf16 180 "--model gpt --preset tutorial $BF16 --remat none --microbatches 4"
compare compare-mlp 90 "--model mlp"
# Issue 36's figure, compile only: Llama-3.1-8B LoRA and QLoRA at sequence 2048, batch 2, chunked
# attention and loss (XLA's compiled account of the whole 32-layer step; nothing is initialized).
ADAPT8B=(--model llama --preset llama-3.1-8b --seq 2048 --batch 2 --microbatches 1 --remat block --attention chunked
	--cross-entropy chunked --policy params=float32,compute=bfloat16,output=float32 --backend "xla:$PLUGIN")
run memory-llama8b-lora 300 "$ONEGPU" memory "${ADAPT8B[@]}" "${LORA[@]}" --json
run memory-llama8b-qlora 300 "$ONEGPU" memory "${ADAPT8B[@]}" "${LORA[@]}" --quantize-base nf4 --json

run nvidia-smi-after 20 nvidia-smi

say "done: $FAILURES step(s) failed; statuses in $SUMMARY"
cat "$SUMMARY"
if [ "$FAILURES" -gt 0 ]; then
	exit 1
fi
exit 0
