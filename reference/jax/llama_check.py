"""The Flax Llama's loss and gradients on random weights and tokens, for onegpu's parity test.

    python reference/jax/llama_check.py DIR

DIR/config.json holds a list of cases, {"name": CASE, "llama": {Hugging Face config.json keys},
"batch": B, "seq": S, "seed": N}. For each, the script initializes the Flax Llama (models.Llama)
from the seed, adds normal noise (std 0.3) to every parameter so that norms and projections are far
from their initial values, draws tokens and labels, computes the mean cross-entropy and its
gradients in float32, and writes, as raw little-endian float32 (int32 for tokens) files:

    DIR/CASE/params/<path>.bin   every parameter, by its path ("model/layers/0/self_attn/q_proj/weight")
    DIR/CASE/grads/<path>.bin    its gradient
    DIR/CASE/tokens.bin, DIR/CASE/labels.bin
    DIR/CASE/result.json         {"loss": ..., "params": [{"path": ..., "shape": [...]}, ...]}

onegpu's test (models.TestLlamaMatchesFlax) loads the weights into models.Llama by the same paths
and compares its loss and gradients.
"""

from __future__ import annotations

import json
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import optax  # noqa: E402
from flax import traverse_util  # noqa: E402

import models  # noqa: E402


def run_case(folder, cfg):
    config = models.llama_config(cfg["llama"])
    model = models.Llama(config)
    rng = np.random.default_rng(cfg["seed"])
    shape = (cfg["batch"], cfg["seq"])
    tokens = rng.integers(0, config.vocab_size, shape, dtype=np.int32)
    labels = rng.integers(0, config.vocab_size, shape, dtype=np.int32)
    flat = traverse_util.flatten_dict(model.init(jax.random.PRNGKey(cfg["seed"]), tokens)["params"])
    flat = {path: value + 0.3 * rng.standard_normal(value.shape).astype(np.float32) for path, value in flat.items()}
    params = traverse_util.unflatten_dict(flat)

    def loss_fn(params):
        logits = model.apply({"params": params}, tokens)
        return optax.softmax_cross_entropy_with_integer_labels(logits.astype(jnp.float32), labels).mean()

    loss, grads = jax.jit(jax.value_and_grad(loss_fn))(params)
    listed = []
    for kind, tree in (("params", params), ("grads", grads)):
        for path, value in traverse_util.flatten_dict(tree).items():
            file = os.path.join(folder, kind, *path) + ".bin"
            os.makedirs(os.path.dirname(file), exist_ok=True)
            np.asarray(value, dtype="<f4").tofile(file)
            if kind == "params":
                listed.append({"path": "/".join(path), "shape": list(value.shape)})
    tokens.astype("<i4").tofile(os.path.join(folder, "tokens.bin"))
    labels.astype("<i4").tofile(os.path.join(folder, "labels.bin"))
    with open(os.path.join(folder, "result.json"), "w") as f:
        json.dump({"loss": float(loss), "params": listed}, f)


def main():
    folder = sys.argv[1]
    with open(os.path.join(folder, "config.json")) as f:
        cases = json.load(f)
    for case in cases:
        run_case(os.path.join(folder, case["name"]), case)


if __name__ == "__main__":
    main()
