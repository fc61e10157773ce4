"""The tutorial's models, and a Llama, in Flax, laid out exactly as onegpu lays them out.

"Training Larger Models on a Single GPU" (UvA DL, Part 1.1 and 1.2) trains an MLP classifier and a
GPT. These modules have the same architecture and parameter names as onegpu's models/ package (which
follows the tutorial's Flax names), so that weights exported by onegpu load here one to one:

    embed/embedding                       [vocab, hidden]
    pos_emb                               [seq_len, hidden]
    block_i/mlp/pre_norm/{scale,bias}     [hidden]
    block_i/mlp/input_layer/{kernel,bias} [hidden, 4·hidden], [4·hidden]
    block_i/mlp/output_layer/...          [4·hidden, hidden], [hidden]
    block_i/attn/pre_norm/...
    block_i/attn/qkv/{kernel,bias}        [hidden, heads, 3·head_dim], [heads, 3·head_dim]
    block_i/attn/output_layer/...         [heads, head_dim, hidden], [hidden]
    post_norm/..., output_layer/...       [hidden, vocab], [vocab]
    MLP classifier: Dense_0, LayerNorm_0, Dense_1

The Llama (LlamaConfig, Llama) follows onegpu's models.Llama and Hugging Face's names; see the
comment above LlamaConfig.

Layers are unrolled (block_0, block_1, ...; onegpu has no scan). Precision follows the policy:
parameters in `param_dtype`, arithmetic in `dtype`, attention softmax in `softmax_dtype`, logits
cast to `output_dtype`.

`layer_dtypes` chooses where the casts sit where Flax and onegpu differ in bfloat16 (in float32 the
two are the same computation):
  "flax"   (default) Flax's own layers as the tutorial uses them: LayerNorm applies its gain and
           offset in float32 and casts once; Embed casts the table before the lookup.
  "onegpu" onegpu's placement: LayerNorm statistics in float32, gain and offset in the compute
           dtype; the lookup in the param dtype, then a cast (the same values; the table's gradient
           is accumulated in the param dtype).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
from jax.ad_checkpoint import checkpoint_name

LAYER_NORM_EPSILON = 1e-6  # Flax's default, and onegpu's


@dataclasses.dataclass(frozen=True)
class GPTConfig:
    hidden_size: int
    num_layers: int
    head_dim: int
    num_heads: int
    mlp_expansion: int
    max_seq_len: int
    vocab_size: int
    dropout_rate: float = 0.0
    dtype: Any = jnp.float32  # compute dtype
    param_dtype: Any = jnp.float32
    output_dtype: Any = jnp.float32
    softmax_dtype: Any = jnp.float32
    remat: Sequence[str] = ()  # any of "mlp", "attn", "block"
    remat_policy: Any = None  # a jax.checkpoint_policies policy, None: save nothing
    layer_dtypes: str = "flax"


class OnegpuLayerNorm(nn.Module):
    """LayerNorm as onegpu computes it: statistics in float32, gain and offset in `dtype`."""

    dtype: Any
    param_dtype: Any = jnp.float32

    @nn.compact
    def __call__(self, x):
        width = x.shape[-1]
        scale = self.param("scale", nn.initializers.ones, (width,), self.param_dtype)
        bias = self.param("bias", nn.initializers.zeros, (width,), self.param_dtype)
        wide = x.astype(jnp.float32)
        mean = wide.mean(-1, keepdims=True)
        centered = wide - mean
        var = (centered * centered).mean(-1, keepdims=True)
        y = (centered * jax.lax.rsqrt(var + LAYER_NORM_EPSILON)).astype(self.dtype)
        return y * scale.astype(self.dtype) + bias.astype(self.dtype)


class OnegpuEmbed(nn.Module):
    """Embed as onegpu computes it: the lookup in the param dtype, then a cast to `dtype`."""

    num_embeddings: int
    features: int
    dtype: Any
    param_dtype: Any = jnp.float32

    @nn.compact
    def __call__(self, tokens):
        table = self.param("embedding", nn.initializers.normal(stddev=1.0 / self.features**0.5),
                           (self.num_embeddings, self.features), self.param_dtype)
        return jnp.take(table, tokens, axis=0).astype(self.dtype)


def layer_norm(config, name=None):
    if config.layer_dtypes == "onegpu":
        return OnegpuLayerNorm(dtype=config.dtype, param_dtype=config.param_dtype, name=name)
    return nn.LayerNorm(epsilon=LAYER_NORM_EPSILON, dtype=config.dtype, param_dtype=config.param_dtype, name=name)


def remat(module, config, part):
    if part not in config.remat:
        return module
    return nn.remat(module, prevent_cse=False, policy=config.remat_policy)


class MLPBlock(nn.Module):
    config: GPTConfig
    train: bool

    @nn.compact
    def __call__(self, x):
        c = self.config
        features = x.shape[-1]
        x = layer_norm(c, "pre_norm")(x)
        x = nn.Dense(c.mlp_expansion * features, dtype=c.dtype, param_dtype=c.param_dtype, name="input_layer")(x)
        x = nn.gelu(x)  # tanh approximation, as onegpu's GELU
        x = nn.Dense(features, dtype=c.dtype, param_dtype=c.param_dtype, name="output_layer")(x)
        return nn.Dropout(rate=c.dropout_rate, deterministic=not self.train)(x)


def dot_product_attention(query, key, value, mask, softmax_dtype):
    """The tutorial's attention: scaled query and key cast to softmax_dtype, masked softmax there,
    weights cast back for the weighted sum of values. Scores and values carry onegpu's remat names."""
    dtype = query.dtype
    query = (query * query.shape[-1] ** -0.5).astype(softmax_dtype)
    key = key.astype(softmax_dtype)
    scores = checkpoint_name(jnp.einsum("...qhd,...khd->...hqk", query, key), "attn_scores")
    scores = jnp.where(mask, scores, jnp.finfo(softmax_dtype).min)
    weights = nn.softmax(scores, axis=-1).astype(dtype)
    return checkpoint_name(jnp.einsum("...hqk,...khd->...qhd", weights, value).astype(dtype), "attn_values")


class AttentionBlock(nn.Module):
    config: GPTConfig
    mask: Any
    train: bool

    @nn.compact
    def __call__(self, x):
        c = self.config
        features = x.shape[-1]
        x = layer_norm(c, "pre_norm")(x)
        qkv = nn.DenseGeneral(features=(c.num_heads, 3 * c.head_dim), dtype=c.dtype, param_dtype=c.param_dtype, name="qkv")(x)
        q, k, v = jnp.split(qkv, 3, axis=-1)
        x = dot_product_attention(q, k, v, self.mask, c.softmax_dtype)
        x = nn.DenseGeneral(features=features, axis=(-2, -1), dtype=c.dtype, param_dtype=c.param_dtype, name="output_layer")(x)
        return nn.Dropout(rate=c.dropout_rate, deterministic=not self.train)(x)


class TransformerBlock(nn.Module):
    config: GPTConfig
    mask: Any
    train: bool

    @nn.compact
    def __call__(self, x):
        c = self.config
        x = x + remat(MLPBlock, c, "mlp")(config=c, train=self.train, name="mlp")(x)
        return x + remat(AttentionBlock, c, "attn")(config=c, mask=self.mask, train=self.train, name="attn")(x)


class Transformer(nn.Module):
    """The tutorial's GPT with its layers unrolled (scan_layers=False)."""

    config: GPTConfig

    @nn.compact
    def __call__(self, tokens, train: bool = True):
        c = self.config
        mask = nn.make_causal_mask(tokens, dtype=jnp.bool_)
        if c.layer_dtypes == "onegpu":
            x = OnegpuEmbed(c.vocab_size, c.hidden_size, dtype=c.dtype, param_dtype=c.param_dtype, name="embed")(tokens)
        else:
            x = nn.Embed(c.vocab_size, c.hidden_size, dtype=c.dtype, param_dtype=c.param_dtype, name="embed")(tokens)
        pos_emb = self.param("pos_emb", nn.initializers.normal(stddev=0.02), (c.max_seq_len, c.hidden_size), c.param_dtype)
        x = x + pos_emb.astype(c.dtype)[None, : x.shape[1]]
        block = remat(TransformerBlock, c, "block")
        for layer in range(c.num_layers):
            x = block(config=c, mask=mask, train=train, name=f"block_{layer}")(x)
        x = layer_norm(c, "post_norm")(x)
        x = nn.Dense(c.vocab_size, dtype=c.dtype, param_dtype=c.param_dtype, name="output_layer")(x)
        return x.astype(c.output_dtype)


@dataclasses.dataclass(frozen=True)
class ClassifierConfig:
    hidden_size: int = 256
    num_classes: int = 100
    dropout_rate: float = 0.0
    dtype: Any = jnp.float32
    param_dtype: Any = jnp.float32
    layer_dtypes: str = "flax"


class MLPClassifier(nn.Module):
    """The tutorial's Part 1.1 classifier: Dense, LayerNorm, SiLU, Dropout, Dense, log-softmax in
    float32. Flax names its layers Dense_0, LayerNorm_0, Dense_1."""

    config: ClassifierConfig

    @nn.compact
    def __call__(self, x, train: bool = True):
        c = self.config
        x = nn.Dense(c.hidden_size, dtype=c.dtype, param_dtype=c.param_dtype)(x)
        if c.layer_dtypes == "onegpu":
            x = OnegpuLayerNorm(dtype=c.dtype, param_dtype=c.param_dtype, name="LayerNorm_0")(x)
        else:
            x = nn.LayerNorm(epsilon=LAYER_NORM_EPSILON, dtype=c.dtype, param_dtype=c.param_dtype)(x)
        x = nn.silu(x)
        x = nn.Dropout(rate=c.dropout_rate, deterministic=not train)(x)
        x = nn.Dense(c.num_classes, dtype=c.dtype, param_dtype=c.param_dtype)(x)
        return nn.log_softmax(x.astype(jnp.float32), axis=-1)


# ---------------------------------------------------------------------------------------------
# Llama, laid out as onegpu's models.Llama (and Hugging Face's LlamaForCausalLM) lays it out:
#
#     model/embed_tokens/weight                          [vocab, hidden]
#     model/layers/N/input_layernorm/weight              [hidden]
#     model/layers/N/self_attn/{q,k,v,o}_proj/weight     [out, in] (PyTorch's layout, no biases)
#     model/layers/N/post_attention_layernorm/weight     [hidden]
#     model/layers/N/mlp/{gate,up,down}_proj/weight      [out, in]
#     model/norm/weight                                  [hidden]
#     lm_head/weight                                     [vocab, hidden] (absent when tied)
#
# The remat blocks are onegpu's: "attn" is input_layernorm + self_attn, "mlp" is
# post_attention_layernorm + mlp, "block" a whole layer (the residual additions outside the
# branches). They are lifted functions, so that the norms keep Hugging Face's paths.


LLAMA_KEYS = ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
              "num_key_value_heads", "head_dim", "rope_theta", "rms_norm_eps", "tie_word_embeddings", "rope_scaling")


def llama_config(hf, **precision):
    """LlamaConfig from a Hugging Face config.json dict (the keys of LLAMA_KEYS; head_dim defaults to
    hidden_size / num_attention_heads) and precision/remat settings."""
    values = {k: hf[k] for k in LLAMA_KEYS if k in hf}
    values.setdefault("head_dim", hf["hidden_size"] // hf["num_attention_heads"])
    scaling = values.get("rope_scaling")
    if scaling and scaling.get("rope_type", scaling.get("type")) != "llama3":
        raise SystemExit(f"rope_scaling {scaling!r}: the reference implements rope_type llama3 only")
    return LlamaConfig(**values, **precision)


@dataclasses.dataclass(frozen=True)
class LlamaConfig:
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    rope_theta: float
    rms_norm_eps: float
    tie_word_embeddings: bool
    rope_scaling: Any = None  # None, or Hugging Face's dict for rope_type "llama3"
    dtype: Any = jnp.float32
    param_dtype: Any = jnp.float32
    output_dtype: Any = jnp.float32
    softmax_dtype: Any = jnp.float32
    remat: Sequence[str] = ()  # any of "mlp", "attn", "block"
    remat_policy: Any = None


def rope_frequencies(theta, head_dim, scaling):
    """transformers' inv_freq (default and "llama3"), each step rounded to float32 as torch does."""
    f32 = np.float32
    exponent = np.arange(0, head_dim, 2, dtype=np.int64).astype(f32) / f32(head_dim)
    freqs = f32(1.0) / np.power(f32(theta), exponent)
    if not scaling:
        return freqs
    factor, low = f32(scaling["factor"]), f32(scaling["low_freq_factor"])
    original = scaling["original_max_position_embeddings"]
    low_wavelen, high_wavelen = f32(original / scaling["low_freq_factor"]), f32(original / scaling["high_freq_factor"])
    wavelen = f32(2 * np.pi) / freqs
    scaled = np.where(wavelen > low_wavelen, freqs / factor, freqs)
    smooth = (f32(original) / wavelen - low) / f32(scaling["high_freq_factor"] - scaling["low_freq_factor"])
    smoothed = (f32(1) - smooth) * scaled / factor + smooth * scaled
    medium = ~(wavelen < high_wavelen) & ~(wavelen > low_wavelen)
    return np.where(medium, smoothed, scaled).astype(f32)


def apply_rotary(x, freqs):
    """Hugging Face's apply_rotary_pos_emb on x [batch, seq, heads, head_dim]: angles, cosines and
    sines in float32, cast to x's dtype, rotate-half layout."""
    angles = jnp.arange(x.shape[1], dtype=jnp.float32)[:, None] * jnp.asarray(freqs)[None, :]
    cos = jnp.cos(angles).astype(x.dtype)[None, :, None, :]
    sin = jnp.sin(angles).astype(x.dtype)[None, :, None, :]
    first, second = jnp.split(x, 2, axis=-1)
    return jnp.concatenate([first * cos - second * sin, second * cos + first * sin], axis=-1)


def grouped_attention(q, k, v, softmax_dtype):
    """onegpu's layers.PlainAttention: q [b, s, heads, d], k and v [b, s, kv_heads, d]; grouped
    query heads contract against the shared key/value heads without copies."""
    b, s, heads, d = q.shape
    group = heads // k.shape[2]
    mask = jnp.tril(jnp.ones((s, s), dtype=jnp.bool_))
    if group == 1:
        return dot_product_attention(q, k, v, mask, softmax_dtype)
    dtype = v.dtype
    q = (q * d**-0.5).astype(softmax_dtype).reshape(b, s, k.shape[2], group, d)
    scores = checkpoint_name(jnp.einsum("bqngd,bknd->bnqgk", q, k.astype(softmax_dtype)), "attn_scores")
    scores = jnp.where(mask[:, None, :], scores, jnp.finfo(softmax_dtype).min)
    weights = nn.softmax(scores, axis=-1).astype(dtype)
    values = checkpoint_name(jnp.einsum("bnqgk,bknd->bqngd", weights, v).astype(dtype), "attn_values")
    return values.reshape(b, s, heads, d)


class Linear(nn.Module):
    """PyTorch's nn.Linear without bias: weight [features, in], y = x·weightᵀ in `dtype`."""

    features: int
    dtype: Any
    param_dtype: Any = jnp.float32

    @nn.compact
    def __call__(self, x):
        w = self.param("weight", nn.initializers.normal(stddev=0.02), (self.features, x.shape[-1]), self.param_dtype)
        return jax.lax.dot_general(x.astype(self.dtype), w.astype(self.dtype), (((x.ndim - 1,), (1,)), ((), ())))


class RMSNorm(nn.Module):
    """LlamaRMSNorm: x / sqrt(mean(x²) + eps) in float32, cast to `dtype`, times the weight."""

    eps: float
    dtype: Any
    param_dtype: Any = jnp.float32

    @nn.compact
    def __call__(self, x):
        w = self.param("weight", nn.initializers.ones, (x.shape[-1],), self.param_dtype)
        wide = x.astype(jnp.float32)
        y = wide * jax.lax.rsqrt((wide * wide).mean(-1, keepdims=True) + self.eps)
        return y.astype(self.dtype) * w.astype(self.dtype)


def llama_remat(fn, config, part):
    if part not in config.remat:
        return fn
    return nn.remat(fn, prevent_cse=False, policy=config.remat_policy)


class LlamaAttention(nn.Module):
    """LlamaAttention: q/k/v projections, rotary embeddings on q and k, grouped_attention, o_proj."""

    config: LlamaConfig

    @nn.compact
    def __call__(self, h):
        c = self.config
        batch, seq = h.shape[:2]

        def heads(name, n):
            return Linear(n * c.head_dim, c.dtype, c.param_dtype, name=name)(h).reshape(batch, seq, n, c.head_dim)

        freqs = rope_frequencies(c.rope_theta, c.head_dim, c.rope_scaling)
        q = apply_rotary(heads("q_proj", c.num_attention_heads), freqs)
        k = apply_rotary(heads("k_proj", c.num_key_value_heads), freqs)
        v = heads("v_proj", c.num_key_value_heads)
        values = grouped_attention(q, k, v, c.softmax_dtype).reshape(batch, seq, c.num_attention_heads * c.head_dim)
        return Linear(c.hidden_size, c.dtype, c.param_dtype, name="o_proj")(values)


class LlamaMLP(nn.Module):
    """LlamaMLP: down_proj(silu(gate_proj(h)) · up_proj(h))."""

    config: LlamaConfig

    @nn.compact
    def __call__(self, h):
        c = self.config
        gate = nn.silu(Linear(c.intermediate_size, c.dtype, c.param_dtype, name="gate_proj")(h))
        up = Linear(c.intermediate_size, c.dtype, c.param_dtype, name="up_proj")(h)
        return Linear(c.hidden_size, c.dtype, c.param_dtype, name="down_proj")(gate * up)


class LlamaDecoderLayer(nn.Module):
    config: LlamaConfig

    @nn.compact
    def __call__(self, x):
        c = self.config

        def attn(mdl, x):
            h = RMSNorm(c.rms_norm_eps, c.dtype, c.param_dtype, name="input_layernorm")(x)
            return LlamaAttention(c, name="self_attn")(h)

        def mlp(mdl, x):
            h = RMSNorm(c.rms_norm_eps, c.dtype, c.param_dtype, name="post_attention_layernorm")(x)
            return LlamaMLP(c, name="mlp")(h)

        def whole(mdl, x):
            x = x + llama_remat(attn, c, "attn")(mdl, x)
            return x + llama_remat(mlp, c, "mlp")(mdl, x)

        return llama_remat(whole, c, "block")(self, x)


class LlamaEmbed(nn.Module):
    """The token table "weight" [vocab, hidden] (LlamaModel looks tokens up in the param dtype, then
    casts, as onegpu does)."""

    config: LlamaConfig

    @nn.compact
    def __call__(self):
        c = self.config
        return self.param("weight", nn.initializers.normal(stddev=0.02), (c.vocab_size, c.hidden_size), c.param_dtype)


class LlamaLayers(nn.Module):
    config: LlamaConfig

    @nn.compact
    def __call__(self, x):
        for i in range(self.config.num_hidden_layers):
            x = LlamaDecoderLayer(self.config, name=str(i))(x)
        return x


class LlamaModel(nn.Module):
    config: LlamaConfig

    @nn.compact
    def __call__(self, tokens):
        c = self.config
        table = LlamaEmbed(c, name="embed_tokens")()
        x = jnp.take(table, tokens, axis=0).astype(c.dtype)
        x = LlamaLayers(c, name="layers")(x)
        return RMSNorm(c.rms_norm_eps, c.dtype, c.param_dtype, name="norm")(x), table


class Llama(nn.Module):
    """LlamaForCausalLM without its cache: logits [batch, seq, vocab] in `output_dtype`."""

    config: LlamaConfig

    @nn.compact
    def __call__(self, tokens, train: bool = True):
        del train  # no dropout
        c = self.config
        hidden, table = LlamaModel(c, name="model")(tokens)
        if c.tie_word_embeddings:
            logits = jax.lax.dot_general(hidden, table.astype(c.dtype), (((hidden.ndim - 1,), (1,)), ((), ())))
        else:
            logits = Linear(c.vocab_size, c.dtype, c.param_dtype, name="lm_head")(hidden)
        return logits.astype(c.output_dtype)
