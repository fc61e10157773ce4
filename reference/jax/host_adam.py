"""JAX side of `onegpu bench --grid host`: time jitted optax Adam on the CPU, print one JSON object.

    python reference/jax/host_adam.py [--params N] [--steps S] [--optimizer adam|adamw]
        [--pjrt-plugin PATH]

The update the host engine times (optim/hostengine.MeasureUpdate): one [N/4096, 4096] float32
matrix with its gradient, optax.adam (b1 0.9, b2 0.999, eps 1e-8; adamw adds weight decay 1e-4) at
a constant learning rate of 1e-3, the parameters and the optimizer's state donated to the jitted
step (updated in place), the new parameters also returned in bfloat16. The step is run S times
after one that compiles, each waited for; the JSON holds every time, the best and the median, the
parameters per second at the best, and the versions and device. JAX runs on its own CPU runtime
(jaxlib's client, all cores) unless --pjrt-plugin names onegpu's plugin.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import jaxlib  # noqa: E402
import optax  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--params", type=int, default=16 << 20, help="parameters of the matrix (a multiple of 4096)")
    ap.add_argument("--steps", type=int, default=5, help="timed updates, after one that compiles")
    ap.add_argument("--optimizer", choices=["adam", "adamw"], default="adam")
    ap.add_argument("--pjrt-plugin", default="", help="run on this PJRT plugin (onegpu's) instead of JAX's own runtime")
    args = ap.parse_args()
    runtime = "jax's own"
    if args.pjrt_plugin:
        from tutorial import use_pjrt_plugin  # noqa: PLC0415 (imports flax, which only this case needs)

        runtime = use_pjrt_plugin(args.pjrt_plugin)
    rows = max(args.params // 4096, 1)
    n = rows * 4096
    i = np.arange(n, dtype=np.int64)
    params = jnp.asarray(((i % 97) - 48).astype(np.float32) * np.float32(1e-3)).reshape(rows, 4096)
    grad = jnp.asarray(((i % 89) - 44).astype(np.float32) * np.float32(1e-4)).reshape(rows, 4096)
    if args.optimizer == "adam":
        opt = optax.adam(1e-3, b1=0.9, b2=0.999, eps=1e-8)
    else:
        opt = optax.adamw(1e-3, b1=0.9, b2=0.999, eps=1e-8, weight_decay=1e-4)
    state = opt.init(params)

    def update(params, state, grad):
        updates, state = opt.update(grad, state, params)
        params = optax.apply_updates(params, updates)
        return params, state, params.astype(jnp.bfloat16)

    step = jax.jit(update, donate_argnums=(0, 1))
    start = time.perf_counter()
    params, state, out = step(params, state, grad)
    jax.block_until_ready((params, state, out))
    compile_seconds = time.perf_counter() - start
    times = []
    for _ in range(max(args.steps, 1)):
        del out
        start = time.perf_counter()
        params, state, out = step(params, state, grad)
        jax.block_until_ready((params, state, out))
        times.append(time.perf_counter() - start)
    best = min(times)
    print(json.dumps({
        "optimizer": args.optimizer, "params": n, "seconds": times, "best_seconds": best,
        "median_seconds": statistics.median(times), "params_per_second": n / best,
        "first_step_seconds": compile_seconds, "runtime": runtime, "device": str(jax.devices()[0]),
        "jax": jax.__version__, "jaxlib": jaxlib.__version__, "optax": optax.__version__,
    }))


if __name__ == "__main__":
    main()
