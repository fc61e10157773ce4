"""Writes optax.adafactor's results on fixed numbers, the fixture optim/adafactor_test.go checks onegpu's Adafactor against.

    python reference/jax/adafactor_fixture.py [--out optim/testdata/adafactor_optax]

The inputs are not stored: they come from an exact integer generator that the Go test repeats
(every value is an integer in [-1000, 1000] over 1024 times a power of two, exact in float32):

    state <- (state * 6364136223846793005 + 1442695040888963407) mod 2^64, from state = seed
    value  = ((state >> 33) mod 2001 - 1000) / 1024

Tensor k (in TENSORS' order) draws its initial parameter from seed 100*k (times 2^-2, or 2^-14 for
the scalar, so that its rms is under optax's minimum parameter scale 1e-3) and its gradient of step
s from seed 100*k + s + 1, times STEP_SCALES[s] and, along axis 0, 2^(i mod 5 - 2) (rows of
different scales, so that the factored statistics are not uniform). The learning rate of step s is
LEARNING_RATES[s] (optax's learning_rate as a schedule of the step).

For each variant (optax.adafactor's settings) it writes, after len(STEP_SCALES) steps, each
tensor's parameter and second-moment state (v_row and v_col for factored tensors, v for the others,
and the momentum when there is one), float32 little-endian, one after another into
<variant>.f32, and manifest.json lists them with their shapes and offsets (in values).
"""

from __future__ import annotations

import argparse
import json
import os

os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import optax  # noqa: E402

# Name and shape of each tensor: a factored matrix (largest axis first), a small matrix, a vector,
# a scalar.
TENSORS = [("matrix", (130, 128)), ("small", (8, 12)), ("vector", (20,)), ("scalar", ())]
STEP_SCALES = [1.0, 2.0**-3, 2.0**2]
LEARNING_RATES = [1e-2, 3e-2, 2e-2]
VARIANTS = {
    "defaults": {},
    # Every option away from its default: the small matrix factors too, clipping and the
    # parameter scale are off, momentum and weight decay are on.
    "options": {"min_dim_size_to_factor": 8, "decay_rate": 0.6, "clipping_threshold": None,
                "multiply_by_parameter_scale": False, "momentum": 0.9, "weight_decay_rate": 1e-3},
}

MASK = (1 << 64) - 1


def draw(seed, shape):
    """The generator's values for a tensor of the given shape, row-major, as float64."""
    n = int(np.prod(shape, dtype=np.int64))
    state, out = seed, np.empty(n, np.float64)
    for i in range(n):
        state = (state * 6364136223846793005 + 1442695040888963407) & MASK
        out[i] = ((state >> 33) % 2001 - 1000) / 1024
    return out.reshape(shape)


def inputs():
    params, grads = {}, [dict() for _ in STEP_SCALES]
    for k, (name, shape) in enumerate(TENSORS):
        params[name] = jnp.asarray(draw(100 * k, shape) * (2.0**-14 if shape == () else 2.0**-2), jnp.float32)
        for s, scale in enumerate(STEP_SCALES):
            g = draw(100 * k + s + 1, shape) * scale
            if len(shape) > 0:
                rows = 2.0 ** (np.arange(shape[0]) % 5 - 2)
                g = g * rows.reshape((shape[0],) + (1,) * (len(shape) - 1))
            grads[s][name] = jnp.asarray(g, jnp.float32)
    return params, grads


def run(settings, params, grads):
    rates = jnp.asarray(LEARNING_RATES, jnp.float32)
    tx = optax.adafactor(learning_rate=lambda count: rates[count], **settings)
    state = tx.init(params)
    update = jax.jit(tx.update)
    for g in grads:
        updates, state = update(g, state, params)
        params = optax.apply_updates(params, updates)
    return params, state


def outputs(params, state):
    """(tensor, what, array) in the fixture's order."""
    factored = next(s for s in state if isinstance(s, optax.FactoredState))
    momentum = next((s for s in state if isinstance(s, optax.EmaState)), None)
    for name, shape in TENSORS:
        yield name, "param", params[name]
        v_row, v_col, v = factored.v_row[name], factored.v_col[name], factored.v[name]
        if v.shape == shape:  # not factored (a factored tensor keeps a placeholder of shape (1,))
            yield name, "v", v
        else:
            yield name, "v_row", v_row
            yield name, "v_col", v_col
        if momentum is not None:
            yield name, "momentum", momentum.ema[name]


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=os.path.join(here, "..", "..", "optim", "testdata", "adafactor_optax"),
                    help="the folder to write manifest.json and <variant>.f32 to")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    params, grads = inputs()
    manifest = {"optax": optax.__version__, "jax": jax.__version__, "tensors": [[n, list(s)] for n, s in TENSORS],
                "step_scales": STEP_SCALES, "learning_rates": LEARNING_RATES, "variants": []}
    for variant, settings in VARIANTS.items():
        final, state = run(settings, params, grads)
        entries, chunks, offset = [], [], 0
        for name, what, array in outputs(final, state):
            array = np.asarray(array, np.float32)
            entries.append({"tensor": name, "what": what, "shape": list(array.shape), "offset": offset})
            chunks.append(array.astype("<f4").ravel())
            offset += array.size
        np.concatenate(chunks).tofile(os.path.join(args.out, variant + ".f32"))
        manifest["variants"].append({"name": variant, "settings": settings, "file": variant + ".f32", "outputs": entries})
    with open(os.path.join(args.out, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
