"""Compile time of JAX's hand-chunked Llama train step, from shapes alone (nothing is initialized).

    python reference/jax/chunked_compile.py [--preset llama-3.2-1b] [--seq 8192] [--batch 1]
        [--block 1024] [--loss-chunk 512] [--remat block] [--plugin /abs/pjrt_c_api_cpu_plugin.so]

The step is the one a JAX user writes for long sequences: the Flax Llama of models.py (bf16
compute, float32 parameters and softmax), its attention computed in blocks of --block queries and
keys with an online softmax (FlashAttention's forward; each query block under jax.checkpoint, so
its backward pass recomputes it), its loss in chunks of --loss-chunk tokens (each chunk's logits
and cross-entropy under jax.checkpoint), the decoder layers rematerialized whole (--remat block,
models.py's nn.remat), optax.adam, the parameters and optimizer state donated. The blocks, chunks
and layers are Python loops, unrolled as onegpu unrolls them (GoMLX v0.26 has no loops): the
program holds the whole model, as onegpu's whole step does.

It lowers and compiles the step with jax.jit(...).lower(ShapeDtypeStructs).compile() on the XLA
CPU PJRT plugin (--plugin, or $ONEGPU_PJRT_PLUGIN: the compiler onegpu's XLA backend runs; JAX's
own CPU client otherwise) and prints one JSON object: the lowering and compile seconds, the
compiled program's memory statistics and the settings. The same shapes as onegpu's
`go test ./train/ -run XXX -bench StreamedCompile -benchtime 1x -stream.preset llama-3.2-1b
-stream.seq 8192 -stream.attention chunked -stream.loss chunked` (its staged programs against its
whole step). --check instead runs a small preset in float32 and checks the chunked loss and
gradients against plain attention and loss.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import optax  # noqa: E402

import models  # noqa: E402
import tutorial  # noqa: E402

# Hugging Face config.json keys of the presets (onegpu's models.LlamaPresets).
PRESETS = {
    "llama-3.2-1b": {
        "vocab_size": 128256, "hidden_size": 2048, "intermediate_size": 8192, "num_hidden_layers": 16,
        "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 64, "rope_theta": 500000.0,
        "rms_norm_eps": 1e-5, "tie_word_embeddings": True,
        "rope_scaling": {"rope_type": "llama3", "factor": 32.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                         "original_max_position_embeddings": 8192},
    },
    "tiny": {
        "vocab_size": 256, "hidden_size": 64, "intermediate_size": 192, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16, "rope_theta": 10000.0,
        "rms_norm_eps": 1e-5, "tie_word_embeddings": True,
    },
}


def chunked_attention(q, k, v, softmax_dtype, block):
    """Causal attention of q [b, s, heads, d] on k and v [b, s, kv_heads, d] in blocks of block
    queries and keys: each query block's online softmax over the key blocks up to it (blocks above
    the diagonal skipped, the diagonal one masked), under jax.checkpoint."""
    b, s, heads, d = q.shape
    kv_heads = k.shape[2]
    group = heads // kv_heads
    dtype = v.dtype
    blocks = [(start, min(s, start + block)) for start in range(0, s, block)]
    outs = []
    for i, (q0, q1) in enumerate(blocks):

        def query_block(qi, k, v, i=i, q0=q0, q1=q1):
            rows = q1 - q0
            qi = (qi * d**-0.5).astype(softmax_dtype).reshape(b, rows, kv_heads, group, d)
            best = jnp.full((b, kv_heads, rows, group), -jnp.inf, jnp.float32)
            total = jnp.zeros((b, kv_heads, rows, group), jnp.float32)
            acc = jnp.zeros((b, kv_heads, rows, group, d), jnp.float32)
            for k0, k1 in blocks[: i + 1]:
                scores = jnp.einsum("bqngd,bknd->bnqgk", qi, k[:, k0:k1].astype(softmax_dtype)).astype(jnp.float32)
                if k0 == q0:  # the diagonal block
                    mask = jnp.arange(q0, q1)[:, None] >= jnp.arange(k0, k1)[None, :]
                    scores = jnp.where(mask[:, None, :], scores, -jnp.inf)
                new_best = jnp.maximum(best, scores.max(-1))
                weights = jnp.exp(scores - new_best[..., None])
                correction = jnp.exp(best - new_best)
                total = total * correction + weights.sum(-1)
                values = jnp.einsum("bnqgk,bknd->bnqgd", weights.astype(dtype), v[:, k0:k1]).astype(jnp.float32)
                acc = acc * correction[..., None] + values
                best = new_best
            out = acc / total[..., None]  # [b, kv_heads, rows, group, d]
            return out.transpose(0, 2, 1, 3, 4).reshape(b, rows, heads, d).astype(dtype)

        outs.append(jax.checkpoint(query_block)(q[:, q0:q1], k, v))
    return jnp.concatenate(outs, axis=1)


def chunked_loss(hidden, table, labels, chunk, dtype):
    """Mean cross-entropy of the tied head in chunks of chunk tokens, each chunk's logits and loss
    under jax.checkpoint (its logits recomputed in the backward pass)."""
    b, s, _ = hidden.shape

    def piece(h, table, y):
        logits = jax.lax.dot_general(h, table.astype(dtype), (((2,), (1,)), ((), ()))).astype(jnp.float32)
        return optax.softmax_cross_entropy_with_integer_labels(logits, y).sum()

    total = 0.0
    for start in range(0, s, chunk):
        total = total + jax.checkpoint(piece)(hidden[:, start : start + chunk], table, labels[:, start : start + chunk])
    return total / (b * s)


def check(config, args, plain_attention):
    """Prints the chunked and the plain step's loss and the largest relative difference of their
    gradients on random weights and tokens; exits 1 when they differ by more than 1e-5."""
    body = models.LlamaModel(config)
    tokens = jax.random.randint(jax.random.PRNGKey(1), (args.batch, args.seq), 0, config.vocab_size)
    labels = jax.random.randint(jax.random.PRNGKey(2), (args.batch, args.seq), 0, config.vocab_size)
    params = body.init(jax.random.PRNGKey(0), tokens)["params"]

    def chunked(params):
        hidden, table = body.apply({"params": params}, tokens)
        return chunked_loss(hidden, table, labels, args.loss_chunk, config.dtype)

    def plain(params):
        models.grouped_attention = plain_attention
        hidden, table = body.apply({"params": params}, tokens)
        logits = jnp.einsum("bsh,vh->bsv", hidden, table).astype(jnp.float32)
        return optax.softmax_cross_entropy_with_integer_labels(logits, labels).mean()

    got, got_grads = jax.value_and_grad(chunked)(params)
    want, want_grads = jax.value_and_grad(plain)(params)
    worst = max(float(jnp.linalg.norm(g - w) / jnp.linalg.norm(w))
                for g, w in zip(jax.tree_util.tree_leaves(got_grads), jax.tree_util.tree_leaves(want_grads)))
    print(json.dumps({"chunked_loss": float(got), "plain_loss": float(want), "largest_gradient_difference": worst}))
    if abs(float(got) - float(want)) > 1e-5 * abs(float(want)) or worst > 1e-5:
        sys.exit(1)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--preset", default="llama-3.2-1b", choices=sorted(PRESETS))
    ap.add_argument("--seq", type=int, default=8192)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--block", type=int, default=0, help="attention block (default: onegpu's, max(1024, seq/8))")
    ap.add_argument("--loss-chunk", type=int, default=512)
    ap.add_argument("--remat", default="block", help="models.py's remat kinds: block, mlp,attn or none")
    ap.add_argument("--plugin", default=os.environ.get("ONEGPU_PJRT_PLUGIN", ""), help="XLA CPU PJRT plugin (default: $ONEGPU_PJRT_PLUGIN)")
    ap.add_argument("--check", action="store_true", help="instead, initialize the model and check that the chunked loss and its gradients "
                    "equal the plain attention's and loss's (float32; use a small preset)")
    args = ap.parse_args()
    runtime = tutorial.use_pjrt_plugin(args.plugin) if args.plugin else "jax's own client"
    block = args.block or max(1024, (args.seq // 8 + 127) // 128 * 128)
    remat = () if args.remat == "none" else tuple(args.remat.split(","))
    config = models.llama_config(PRESETS[args.preset], dtype=jnp.float32 if args.check else jnp.bfloat16, param_dtype=jnp.float32,
                                 softmax_dtype=jnp.float32, remat=remat)
    plain_attention = models.grouped_attention
    models.grouped_attention = lambda q, k, v, softmax_dtype: chunked_attention(q, k, v, softmax_dtype, block)
    if args.check:
        check(config, args, plain_attention)
        return
    body = models.LlamaModel(config)
    tokens = jax.ShapeDtypeStruct((args.batch, args.seq), jnp.int32)

    def loss_fn(params, tokens, labels):
        hidden, table = body.apply({"params": params}, tokens)
        return chunked_loss(hidden, table, labels, args.loss_chunk, config.dtype)

    tx = optax.adam(1e-3)

    def train_step(params, opt_state, tokens, labels):
        loss, grads = jax.value_and_grad(loss_fn)(params, tokens, labels)
        updates, opt_state = tx.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    params = jax.eval_shape(lambda: body.init(jax.random.PRNGKey(0), jnp.zeros(tokens.shape, tokens.dtype))["params"])
    opt_state = jax.eval_shape(tx.init, params)
    start = time.perf_counter()
    lowered = jax.jit(train_step, donate_argnums=(0, 1)).lower(params, opt_state, tokens, tokens)
    lowered_at = time.perf_counter()
    compiled = lowered.compile()
    compiled_at = time.perf_counter()
    n_params = sum(x.size for x in jax.tree_util.tree_leaves(params))
    print(json.dumps({
        "preset": args.preset, "seq": args.seq, "batch": args.batch, "attention_block": block, "loss_chunk": args.loss_chunk,
        "remat": args.remat, "params": int(n_params), "runtime": runtime, "jax": jax.__version__,
        "lower_seconds": round(lowered_at - start, 3), "compile_seconds": round(compiled_at - lowered_at, 3),
        "memory": tutorial.memory_stats(compiled),
    }))


if __name__ == "__main__":
    main()
