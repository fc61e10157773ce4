"""JAX/Flax side of onegpu's side-by-side check: train the run onegpu exported, print one JSON object.

    python reference/jax/tutorial.py DIR [--optimizer adam|adamw|adafactor] [--weight-decay W]
        [--accumulate loop|scan] [--layer-dtypes flax|onegpu] [--pjrt-plugin PATH]

DIR is what onegpu's train.Trainer.Export wrote (`onegpu compare` does it): config.json,
params/<flax path>.npy (float32) and inputs.npy / labels.npy (the batches of every step, stacked).
The script builds the model config["model"] names (models.py: the tutorial's "gpt" or "mlp", or
"llama" with its shape under config["llama"] in Hugging Face's config.json keys) with onegpu's
configuration, loads the weights
(every exported parameter must match one of the model's, by path and shape, and none may be left
over), and trains config["steps"] steps the way the tutorial does: per-micro-batch gradients of
the mean cross-entropy, summed and divided by the number of micro-batches (accumulate_gradients),
then the optimizer --optimizer names on optax.warmup_exponential_decay_schedule: optax.adam (the
tutorial's), optax.adamw or optax.adafactor, each as onegpu's counterpart computes it (see
make_optimizer).

The JSON on stdout holds, per step, the loss and accuracy the step computed (before its update, as
onegpu reports them) and its wall time (the step is run, its metrics fetched to the host), the
compile time (lower + compile) apart from the steps, XLA's memory analysis of the compiled step,
and the versions and device. Progress goes to stderr.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import flax  # noqa: E402
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import jaxlib  # noqa: E402
import optax  # noqa: E402
from flax import traverse_util  # noqa: E402

import models  # noqa: E402

DTYPES = {"float32": jnp.float32, "bfloat16": jnp.bfloat16, "float16": jnp.float16, "float64": jnp.float64}

REMAT_POLICIES = {
    "nothing_saveable": None,  # nn.remat's default: save nothing
    "everything_saveable": jax.checkpoint_policies.everything_saveable,
    "dots_saveable": jax.checkpoint_policies.dots_saveable,
    "checkpoint_dots": jax.checkpoint_policies.dots_saveable,
    "dots_with_no_batch_dims_saveable": jax.checkpoint_policies.dots_with_no_batch_dims_saveable,
    "checkpoint_dots_with_no_batch_dims": jax.checkpoint_policies.dots_with_no_batch_dims_saveable,
}


PLUGIN_PLATFORM = "onegpu_pjrt"


def use_pjrt_plugin(path):
    """Runs JAX on the PJRT plugin at path (the one onegpu runs on) instead of its own runtime.

    On CPU JAX's own runtime is jaxlib's built-in client, a different build from a PJRT CPU plugin
    (the same program runs at different speeds on the two), so a side-by-side timing loads the
    plugin here. A plugin JAX already loads itself (a jax_plugins package, e.g. the CUDA plugin) is
    left to JAX: it is already the same runtime. Must run before JAX starts a backend. Returns what
    the result names as the runtime.
    """
    real = os.path.realpath(path)
    try:
        import jax_plugins  # noqa: PLC0415 (namespace package of JAX's plugins, absent on CPU-only installs)

        own = [os.path.realpath(d) for d in jax_plugins.__path__]
    except ImportError:
        own = []
    if any(real.startswith(d + os.sep) for d in own):
        return f"jax's own plugin {real}"
    from jax._src import xla_bridge  # noqa: PLC0415

    xla_bridge.register_plugin(PLUGIN_PLATFORM, library_path=real)
    jax.config.update("jax_platforms", PLUGIN_PLATFORM)
    return f"pjrt plugin {real}"


def log(msg):
    print(f"[jax] {msg}", file=sys.stderr, flush=True)


def remat_policy(name):
    if name in REMAT_POLICIES:
        return REMAT_POLICIES[name]
    kind, _, names = name.partition(":")
    if kind == "save_only_these_names":
        return jax.checkpoint_policies.save_only_these_names(*names.split(","))
    if kind == "save_any_names_but_these":
        return jax.checkpoint_policies.save_any_names_but_these(*names.split(","))
    raise SystemExit(f"remat policy {name!r} has no JAX equivalent here; known: {sorted(REMAT_POLICIES)}")


def build_model(cfg, layer_dtypes):
    policy = cfg["policy"]
    if cfg["model"] == "gpt":
        g = cfg["gpt"]
        return models.Transformer(models.GPTConfig(
            hidden_size=g["hidden_size"], num_layers=g["num_layers"], head_dim=g["head_dim"], num_heads=g["num_heads"],
            mlp_expansion=g["mlp_expansion"], max_seq_len=g["max_seq_len"], vocab_size=g["vocab_size"],
            dropout_rate=g["dropout_rate"], dtype=DTYPES[policy["compute"]], param_dtype=DTYPES[policy["params"]],
            output_dtype=DTYPES[policy["output"]], softmax_dtype=DTYPES[cfg["softmax_dtype"]],
            remat=tuple(cfg["remat"]), remat_policy=remat_policy(cfg["remat_policy"]), layer_dtypes=layer_dtypes))
    if cfg["model"] == "mlp":
        m = cfg["classifier"]
        if cfg["remat"]:
            raise SystemExit("the MLP classifier has no blocks to rematerialize")
        return models.MLPClassifier(models.ClassifierConfig(
            hidden_size=m["hidden_size"], num_classes=m["num_classes"], dropout_rate=m["dropout_rate"],
            dtype=DTYPES[policy["compute"]], param_dtype=DTYPES[policy["params"]], layer_dtypes=layer_dtypes))
    if cfg["model"] == "llama":
        # The shape as Hugging Face's config.json names it (onegpu writes those keys).
        return models.Llama(models.llama_config(
            cfg["llama"], dtype=DTYPES[policy["compute"]], param_dtype=DTYPES[policy["params"]],
            output_dtype=DTYPES[policy["output"]], softmax_dtype=DTYPES[cfg["softmax_dtype"]],
            remat=tuple(cfg["remat"]), remat_policy=remat_policy(cfg["remat_policy"])))
    raise SystemExit(f"unknown model {cfg['model']!r}: the reference has gpt, mlp and llama")


def load_params(folder, cfg, model, example):
    """Loads the exported weights into the model's parameter tree; any mismatch is fatal."""
    expected = jax.eval_shape(lambda x: model.init(jax.random.PRNGKey(0), x, train=False), example)["params"]
    flat_expected = {"/".join(k): v for k, v in traverse_util.flatten_dict(expected).items()}
    exported = {p["path"]: p for p in cfg["params"]}
    problems = []
    for path in sorted(set(flat_expected) - set(exported)):
        problems.append(f"the Flax model has {path} {tuple(flat_expected[path].shape)}, onegpu exported no such parameter")
    for path in sorted(set(exported) - set(flat_expected)):
        problems.append(f"onegpu exported {path} {tuple(exported[path]['shape'])}, the Flax model has no such parameter")
    flat = {}
    for path in sorted(set(exported) & set(flat_expected)):
        array = np.load(os.path.join(folder, "params", *path.split("/")) + ".npy")
        want = flat_expected[path]
        if tuple(array.shape) != tuple(want.shape):
            problems.append(f"{path}: onegpu's shape {tuple(array.shape)}, Flax's {tuple(want.shape)}")
            continue
        flat[tuple(path.split("/"))] = jnp.asarray(array, dtype=want.dtype)
    if problems:
        raise SystemExit("parameters do not match:\n  " + "\n  ".join(problems))
    return traverse_util.unflatten_dict(flat)


OPTIMIZERS = ("adam", "adamw", "adafactor")


def make_optimizer(cfg, schedule, flag_name=None, flag_weight_decay=None):
    """The optax optimizer that computes what onegpu's optimizer does, on the learning-rate schedule.

    config.json names it ("optimizer": optax's name, "optimizer_params": its arguments by optax's
    names; an older export has only "adam": b1, b2, eps). --optimizer and --weight-decay, when
    given, must say the same (a configuration that does not is a mistake, not a choice), and
    stand in for what config.json does not say.

    adam: optax.adam with b1, b2, eps (GoMLX's Adam: eps outside the square root).
    adamw: optax.adamw with the same and weight_decay, decoupled and multiplied by the learning rate,
      on every parameter (mask None), as GoMLX's AdamConfig.WeightDecay applies it to every
      trainable variable: p <- p - lr * (m_hat / (sqrt(v_hat) + eps) + weight_decay * p).
    adafactor: optax.adafactor with optim.Adafactor's arguments (its Optax method: every argument,
      booleans as 0 or 1, 0 for None), optax's defaults without them, and the schedule as its
      learning rate; --weight-decay is its weight_decay_rate (added after the learning rate).
    """
    name = cfg.get("optimizer") or flag_name or "adam"
    if flag_name and flag_name != name:
        raise SystemExit(f"--optimizer {flag_name}, but onegpu trained with {name} (config.json): the two sides would differ")
    if name not in OPTIMIZERS:
        raise SystemExit(f"onegpu trained with {name}, which has no optax counterpart here: the reference has {', '.join(OPTIMIZERS)}")
    params = dict(cfg.get("adam") or {}) if name in ("adam", "adamw") else {}  # Adam's eps is not Adafactor's
    params.update(cfg.get("optimizer_params") or {})
    decay_key = {"adam": "weight_decay", "adamw": "weight_decay", "adafactor": "weight_decay_rate"}[name]
    if flag_weight_decay is not None:
        if flag_weight_decay < 0:
            raise SystemExit(f"--weight-decay {flag_weight_decay}: a weight decay is at least 0")
        if decay_key in params and params[decay_key] != flag_weight_decay:
            raise SystemExit(f"--weight-decay {flag_weight_decay}, but onegpu's {name} has {decay_key} {params[decay_key]} (config.json)")
        params[decay_key] = flag_weight_decay
    if name == "adam":
        if params.get("weight_decay"):
            raise SystemExit(f"weight decay {params['weight_decay']} with adam: Adam has no weight decay, use adamw")
        return optax.adam(learning_rate=schedule, b1=params["b1"], b2=params["b2"], eps=params["eps"])
    if name == "adamw":
        return optax.adamw(learning_rate=schedule, b1=params["b1"], b2=params["b2"], eps=params["eps"],
                           weight_decay=params.get("weight_decay", 0.0), mask=None)
    p = params
    return optax.adafactor(
        learning_rate=schedule, min_dim_size_to_factor=int(p.get("min_dim_size_to_factor", 128)),
        decay_rate=p.get("decay_rate", 0.8), decay_offset=int(p.get("decay_offset", 0)),
        multiply_by_parameter_scale=bool(p.get("multiply_by_parameter_scale", 1)),
        clipping_threshold=p.get("clipping_threshold", 1.0) or None, momentum=p.get("momentum") or None,
        weight_decay_rate=p.get("weight_decay_rate") or None, eps=p.get("eps", 1e-30), factored=bool(p.get("factored", 1)))


def make_train_step(model, tx, num_minibatches, accumulate):
    def loss_fn(params, inputs, labels, rng):
        logits = model.apply({"params": params}, inputs, train=True, rngs={"dropout": rng})
        loss = optax.softmax_cross_entropy_with_integer_labels(logits.astype(jnp.float32), labels)
        correct = jnp.equal(jnp.argmax(logits, axis=-1), labels)
        count = np.prod(labels.shape)
        return loss.mean(), {"loss": (loss.sum(), count), "accuracy": (correct.sum(), count)}

    grad_fn = jax.value_and_grad(loss_fn, has_aux=True)

    def minibatch(x, i, size):
        if isinstance(i, int):
            return x[i * size:(i + 1) * size]
        return jax.lax.dynamic_slice_in_dim(x, i * size, size, axis=0)

    def accumulate_gradients(params, inputs, labels, rng):
        size = inputs.shape[0] // num_minibatches
        rngs = jax.random.split(rng, num_minibatches)

        def one(i):
            (_, metrics), grads = grad_fn(params, minibatch(inputs, i, size), minibatch(labels, i, size), rngs[i])
            return grads, metrics

        if accumulate == "scan" and num_minibatches > 1:
            shapes = jax.eval_shape(one, 0)
            zeros = jax.tree_util.tree_map(lambda s: jnp.zeros(s.shape, s.dtype), shapes)

            def body(carry, i):
                return jax.tree_util.tree_map(jnp.add, carry, one(i)), None

            (grads, metrics), _ = jax.lax.scan(body, zeros, jnp.arange(num_minibatches))
        else:
            grads, metrics = None, None
            for i in range(num_minibatches):
                g, m = one(i)
                if grads is None:
                    grads, metrics = g, m
                else:
                    grads = jax.tree_util.tree_map(jnp.add, grads, g)
                    metrics = jax.tree_util.tree_map(jnp.add, metrics, m)
        return jax.tree_util.tree_map(lambda g: g / num_minibatches, grads), metrics

    def train_step(state, inputs, labels):
        params, opt_state, rng = state
        rng, step_rng = jax.random.split(rng)
        grads, metrics = accumulate_gradients(params, inputs, labels, step_rng)
        updates, opt_state = tx.update(grads, opt_state, params)
        params = optax.apply_updates(params, updates)
        loss_sum, count = metrics["loss"]
        correct, _ = metrics["accuracy"]
        return (params, opt_state, rng), (loss_sum / count, correct / count, jnp.asarray(count, jnp.float32))

    return train_step


def memory_stats(compiled):
    m = compiled.memory_analysis()
    if m is None:
        return None
    out = {}
    for ours, theirs in [("argument_bytes", "argument_size_in_bytes"), ("output_bytes", "output_size_in_bytes"),
                         ("alias_bytes", "alias_size_in_bytes"), ("temp_bytes", "temp_size_in_bytes"),
                         ("code_bytes", "generated_code_size_in_bytes"), ("peak_memory_bytes", "peak_memory_in_bytes")]:
        value = getattr(m, theirs, None)
        if value is not None:
            out[ours] = int(value)
    if all(k in out for k in ("argument_bytes", "output_bytes", "alias_bytes", "temp_bytes", "code_bytes")):
        # The formula onegpu uses for its own compiled account (graph.CompiledMemory.TotalBytes).
        out["total_bytes"] = out["argument_bytes"] + out["output_bytes"] - out["alias_bytes"] + out["temp_bytes"] + out["code_bytes"]
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("folder", help="the folder onegpu exported (config.json, params/, inputs.npy, labels.npy)")
    ap.add_argument("--accumulate", choices=["auto", "loop", "scan"], default="auto",
                    help="micro-batch loop: unrolled Python loop or lax.scan (auto: the tutorial's choice, "
                         "scan for the GPT as in Part 1.2 and for the Llama, loop for the MLP as in Part 1.1)")
    ap.add_argument("--layer-dtypes", choices=["flax", "onegpu"], default="flax",
                    help="where LayerNorm and Embed cast in bfloat16: Flax's layers (the tutorial) or onegpu's placement")
    ap.add_argument("--optimizer", choices=OPTIMIZERS, default=None,
                    help="optax.adam (the tutorial's), optax.adamw or optax.adafactor, as onegpu computes them; "
                         "must be config.json's when it names one (default: config.json's, then adam)")
    ap.add_argument("--weight-decay", type=float, default=None,
                    help="adamw: its decoupled weight decay; adafactor: its weight_decay_rate; must be config.json's "
                         "when it has one (default: config.json's, then none)")
    ap.add_argument("--steps", type=int, default=0, help="train this many steps (default: config.json's)")
    ap.add_argument("--hlo", default="", help="write the compiled step's optimized HLO (compiled.as_text()) to this file")
    ap.add_argument("--pjrt-plugin", default="",
                    help="run on this PJRT plugin (onegpu's) instead of JAX's own runtime (default: JAX's own)")
    ap.add_argument("--compile-only", action="store_true",
                    help="compile the step and report its memory and compile time without training")
    args = ap.parse_args()
    runtime = use_pjrt_plugin(args.pjrt_plugin) if args.pjrt_plugin else "jax's own"

    with open(os.path.join(args.folder, "config.json")) as f:
        cfg = json.load(f)
    if cfg.get("loss_scale", "none") not in ("none", ""):
        raise SystemExit(f"loss scale {cfg['loss_scale']!r}: the reference trains without loss scaling")
    steps = args.steps or cfg["steps"]
    accumulate = args.accumulate
    if accumulate == "auto":
        accumulate = "loop" if cfg["model"] == "mlp" else "scan"

    inputs = np.load(os.path.join(args.folder, cfg["inputs"]))
    labels = np.load(os.path.join(args.folder, cfg["labels"]))
    if inputs.shape[0] < steps:
        raise SystemExit(f"{cfg['inputs']} holds {inputs.shape[0]} batches, {steps} steps need one each")
    model = build_model(cfg, args.layer_dtypes)
    params = load_params(args.folder, cfg, model, jnp.asarray(inputs[0][: cfg["batch"] // cfg["micro_batches"]]))

    s = cfg["schedule"]
    schedule = optax.warmup_exponential_decay_schedule(
        init_value=s["init_value"], peak_value=s["peak_value"], warmup_steps=s["warmup_steps"],
        transition_steps=s["transition_steps"], decay_rate=s["decay_rate"])
    tx = make_optimizer(cfg, schedule, args.optimizer, args.weight_decay)
    optimizer = cfg.get("optimizer") or args.optimizer or "adam"
    state = (params, tx.init(params), jax.random.PRNGKey(cfg.get("seed", 0)))

    step_fn = jax.jit(make_train_step(model, tx, cfg["micro_batches"], accumulate), donate_argnums=(0,))
    device = jax.devices()[0]
    batches = [(jax.device_put(inputs[i], device), jax.device_put(labels[i], device)) for i in range(steps)]

    log(f"compiling the train step ({cfg['model']}, {optimizer}, policy {cfg['policy']}, remat {cfg['remat'] or 'none'}, "
        f"{cfg['micro_batches']} micro-batches, accumulate {accumulate}) on {device.device_kind}")
    start = time.perf_counter()
    compiled = step_fn.lower(state, *batches[0]).compile()
    compile_seconds = time.perf_counter() - start
    memory = memory_stats(compiled)
    if args.hlo:
        with open(args.hlo, "w") as f:
            f.write(compiled.as_text())
    if args.compile_only:
        steps = 0

    losses, accuracies, step_seconds, counts = [], [], [], []
    for i in range(steps):
        start = time.perf_counter()
        state, (loss, accuracy, count) = compiled(state, *batches[i])
        loss, accuracy, count = float(loss), float(accuracy), float(count)  # waits for the step
        step_seconds.append(time.perf_counter() - start)
        losses.append(loss)
        accuracies.append(accuracy)
        counts.append(count)
        log(f"step {i + 1}/{steps}  loss {loss:.6f}  accuracy {accuracy:.4f}  {step_seconds[-1]:.3f}s")

    later = step_seconds[1:]
    mean_step = sum(later) / len(later) if later else None
    result = {
        "framework": "jax",
        "jax": jax.__version__,
        "jaxlib": jaxlib.__version__,
        "flax": flax.__version__,
        "optax": optax.__version__,
        "platform": device.platform,
        "device_kind": device.device_kind,
        "runtime": runtime,
        "optimizer": optimizer,
        "accumulate": accumulate,
        "layer_dtypes": args.layer_dtypes,
        "xla_flags": os.environ.get("XLA_FLAGS", ""),
        "steps": steps,
        "loss": losses,
        "accuracy": accuracies,
        "step_seconds": step_seconds,
        "compile_seconds": compile_seconds,
        "first_step_seconds": compile_seconds + (step_seconds[0] if step_seconds else 0),
        "mean_step_seconds": mean_step,
        "tokens_per_second": (sum(counts[1:]) / sum(later)) if later else None,
        "memory": memory,
    }
    for key in ("loss", "accuracy"):  # JSON has no NaN: a diverged step is null
        result[key] = [v if np.isfinite(v) else None for v in result[key]]
    json.dump(result, sys.stdout, allow_nan=False)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
