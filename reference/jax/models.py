"""The tutorial's models in Flax, laid out exactly as onegpu lays them out.

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
