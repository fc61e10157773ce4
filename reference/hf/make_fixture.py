"""The Hugging Face fixtures of onegpu's hf package, made and checked with transformers itself.

    python make_fixture.py make [OUT [NAME...]]     # writes the fixtures below (or those named) into OUT
                                                    # (default hf/testdata)
    python make_fixture.py compare EXPORTED FIXTURE # loads a folder onegpu exported into transformers and
                                                    # compares its logits with FIXTURE's (e.g. hf/testdata/llama3_untied)
    python make_fixture.py loss FOLDER TOKENS.npy    # transformers' mean next-token cross-entropy of the ids
    python make_fixture.py greedy [DIR [NAME...]]    # writes NAME.greedy.json beside each fixture in DIR
                                                    # (default hf/testdata): after make, and after
                                                    # text_fixture.py has given a fixture its tokenizer

Each fixture is a folder that save_pretrained wrote (config.json, safetensors weights) and, beside
it, FIXTURE.logits.safetensors with "tokens" (int64 [batch, seq]) and transformers' float32
"logits" [batch, seq, vocab] for them, and FIXTURE.greedy.json (the greedy command): transformers'
greedy continuations (generate(do_sample=False) in float32) of prompts taken from those tokens, and
for a fixture whose folder holds a tokenizer.json, of TEXT_PROMPT, with the continuation's text. The models are tiny and random, with weights scaled up from
transformers' std 0.02 so that logits are of order one and a wrong rotation, norm or head shows.

Install into a separate venv (torch is ~3 GB; CI does not need it):
    python3.12 -m venv /work/hfvenv && /work/hfvenv/bin/pip install -r reference/hf/requirements.txt
"""
import json
import os
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # everything is local; never reach for the hub

import numpy as np
import torch
from safetensors.numpy import load_file, save_file
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer, GenerationConfig

# Each fixture is a model_type (the family transformers builds, as AutoConfig.for_model names it),
# its config, the dtype it is saved in, the shard size and the seed of its weights and tokens.
FIXTURES = {
    # Llama 3 style: rotary frequency scaling (all three of its regimes at head_dim 16), untied
    # output layer, grouped-query attention (4 heads on 2), non-default theta and epsilon; float32.
    "llama3_untied": dict(
        model_type="llama",
        config=dict(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                    num_attention_heads=4, num_key_value_heads=2, head_dim=16, max_position_embeddings=128,
                    rope_theta=50000.0, rms_norm_eps=1e-6, tie_word_embeddings=False,
                    rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                  "high_freq_factor": 4.0, "original_max_position_embeddings": 32}),
        dtype=torch.float32, max_shard_size=None, seed=1),
    # Llama 2 / TinyLlama style: no scaling, tied embeddings, one key/value head; saved in bfloat16
    # and sharded (an index and several files), as published checkpoints are.
    "tied_bf16_sharded": dict(
        model_type="llama",
        config=dict(vocab_size=128, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                    num_attention_heads=4, num_key_value_heads=1, head_dim=8, max_position_embeddings=64,
                    rope_theta=10000.0, rms_norm_eps=1e-5, tie_word_embeddings=True, rope_scaling=None),
        dtype=torch.bfloat16, max_shard_size="20KB", seed=2),
    # Mistral with a sliding window (24) shorter than its positions (128) and as long as the
    # fixture's sequences (SEQ): transformers applies the window, onegpu's full causal attention
    # must give the same logits within it.
    "mistral_window": dict(
        model_type="mistral",
        config=dict(vocab_size=128, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                    num_attention_heads=4, num_key_value_heads=2, head_dim=8, max_position_embeddings=128,
                    sliding_window=24, rope_theta=10000.0, rms_norm_eps=1e-5, tie_word_embeddings=False),
        dtype=torch.float32, max_shard_size=None, seed=3),
    # Qwen2.5 style: biases on q_proj, k_proj and v_proj (random, like every weight here), rope_theta
    # 1e6 without scaling, epsilon 1e-6, tied embeddings (as the 0.5B and 1.5B models), grouped-query
    # attention without a sliding window; float32.
    "qwen2_tied": dict(
        model_type="qwen2",
        config=dict(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                    num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
                    rope_theta=1000000.0, rms_norm_eps=1e-6, tie_word_embeddings=True,
                    use_sliding_window=False),
        dtype=torch.float32, max_shard_size=None, seed=3),
}
BATCH, SEQ = 2, 24
# Greedy continuations: prompts of these lengths (the first tokens of the fixture's rows), each
# continued by NEW_TOKENS tokens, fewer where the model's positions (or sliding window) end first.
GREEDY_PROMPTS, NEW_TOKENS = (8, 1), 32
# A fixture with a tokenizer continues this prompt (its tokenizer's ids, add_special_tokens: the
# template's BOS) until an end token or NEW_TOKENS tokens; llama3_untied's tokenizer was trained on
# Genesis and Exodus (text_fixture.py).
TEXT_PROMPT = "In the beginning God created"


def tokens_for(vocab, seed):
    return np.random.default_rng(seed).integers(0, vocab, size=(BATCH, SEQ), dtype=np.int64)


def logits_of(model, tokens):
    with torch.no_grad():
        return model(torch.from_numpy(tokens)).logits.float().numpy()


def make(out, names):
    os.makedirs(out, exist_ok=True)
    for name in names or FIXTURES:
        spec = FIXTURES[name]
        torch.manual_seed(spec["seed"])
        config = AutoConfig.for_model(spec["model_type"], **spec["config"])
        model = AutoModelForCausalLM.from_config(config).eval()
        with torch.no_grad():
            for pname, p in model.named_parameters():
                if pname.endswith("norm.weight"):
                    p.copy_(1 + 0.2 * torch.randn_like(p))  # not all ones: a misread norm shows
                else:
                    p.copy_(0.15 * torch.randn_like(p))
        folder = os.path.join(out, name)
        model.to(spec["dtype"])
        kwargs = {"max_shard_size": spec["max_shard_size"]} if spec["max_shard_size"] else {}
        model.save_pretrained(folder, **kwargs)
        # The reference logits come from the saved files, read back in float32 as transformers reads
        # them: for the bfloat16 fixture, float32 math on bfloat16-rounded weights.
        reloaded = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
        tokens = tokens_for(spec["config"]["vocab_size"], spec["seed"])
        logits = logits_of(reloaded, tokens)
        save_file({"tokens": tokens, "logits": logits}, os.path.join(out, name + ".logits.safetensors"))
        # The same ids as a .npy, what `onegpu eval --tokens` and `train --data` read (notebook 04).
        np.save(os.path.join(out, name + ".tokens.npy"), tokens)
        files = sorted(os.listdir(folder))
        print(f"{name}: {sum(p.numel() for p in model.parameters())} parameters, files {files}, "
              f"logits {list(logits.shape)} in [{logits.min():.3f}, {logits.max():.3f}]")


def positions_of(config):
    """The longest sequence onegpu's model reads: max_position_embeddings, or the sliding window
    when shorter (onegpu attends to every earlier position, the window's attention within it)."""
    window = config.get("sliding_window") or config["max_position_embeddings"]
    return min(config["max_position_embeddings"], window)


def continue_greedily(model, prompt, new_tokens, eos):
    """transformers' greedy continuation of prompt (a list of ids): generate(do_sample=False),
    stopping at eos (a list of ids; empty: never, exactly new_tokens tokens)."""
    config = GenerationConfig(do_sample=False, max_new_tokens=new_tokens, eos_token_id=eos or None,
                              pad_token_id=eos[0] if eos else 0, num_beams=1)
    with torch.no_grad():
        out = model.generate(torch.tensor([prompt]), attention_mask=torch.ones(1, len(prompt), dtype=torch.long),
                             generation_config=config)
    return out[0, len(prompt):].tolist()


def compact_json(value):
    """value as JSON with one line per key and per list item of the top level object: diffs stay
    readable, lists of ids on one line."""
    lines = []
    for key, v in value.items():
        if isinstance(v, list):
            items = ",\n  ".join(json.dumps(x, ensure_ascii=False) for x in v)
            lines.append(f"{json.dumps(key)}: [\n  {items}\n ]")
        else:
            lines.append(f"{json.dumps(key)}: {json.dumps(v, ensure_ascii=False)}")
    return "{\n " + ",\n ".join(lines) + "\n}\n"


def greedy(out, names):
    """Writes NAME.greedy.json for each fixture in out: transformers' greedy continuations in
    float32 of prompts of GREEDY_PROMPTS lengths from the fixture's rows, never stopping early (no
    end token), and for a fixture with a tokenizer, of TEXT_PROMPT as its tokenizer encodes it,
    stopping at the generation config's end tokens, with the continuation's text (special tokens
    skipped)."""
    for name in names or FIXTURES:
        folder = os.path.join(out, name)
        model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
        tokens = load_file(os.path.join(out, name + ".logits.safetensors"))["tokens"]
        limit = positions_of(FIXTURES[name]["config"])
        cases = []
        for row, length in enumerate(GREEDY_PROMPTS):
            prompt = tokens[row, :length].tolist()
            new = min(NEW_TOKENS, limit - length)
            cases.append({"prompt": prompt, "max_new_tokens": new, "stop_tokens": [],
                          "tokens": continue_greedily(model, prompt, new, [])})
        result = {"transformers": __import__("transformers").__version__, "dtype": "float32", "cases": cases}
        if os.path.exists(os.path.join(folder, "tokenizer.json")):
            tok = AutoTokenizer.from_pretrained(folder)
            prompt = tok(TEXT_PROMPT)["input_ids"]
            eos = model.generation_config.eos_token_id
            eos = eos if isinstance(eos, list) else [] if eos is None else [eos]
            new = continue_greedily(model, prompt, NEW_TOKENS, eos)
            result["text"] = {"prompt_text": TEXT_PROMPT, "prompt": prompt, "max_new_tokens": NEW_TOKENS,
                              "stop_tokens": eos, "tokens": new, "text": tok.decode(new, skip_special_tokens=True)}
        with open(os.path.join(out, name + ".greedy.json"), "w") as f:
            f.write(compact_json(result))
        print(f"{name}: {len(cases)} prompts" + (f", text {result['text']['text']!r}" if "text" in result else ""))


def loss(folder, tokens_npy):
    """Prints transformers' mean next-token cross-entropy of the token ids [batch, seq] in
    tokens_npy under the checkpoint in folder (float32), as onegpu eval --json does."""
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    tokens = torch.from_numpy(np.load(tokens_npy).astype(np.int64))
    with torch.no_grad():
        mean = model(tokens, labels=tokens).loss
    print(json.dumps({"loss": float(mean), "tokens": int(tokens.shape[0] * (tokens.shape[1] - 1))}))


def compare(exported, fixture):
    ref = load_file(fixture.rstrip("/") + ".logits.safetensors")
    model = AutoModelForCausalLM.from_pretrained(exported, dtype=torch.float32).eval()
    logits = logits_of(model, ref["tokens"])
    diff = float(np.max(np.abs(logits - ref["logits"])))
    original = AutoModelForCausalLM.from_pretrained(fixture, dtype=torch.float32).state_dict()
    weights = max(float((p - original[k]).abs().max()) for k, p in model.state_dict().items())
    print(json.dumps({"exported": exported, "fixture": fixture, "class": type(model).__name__,
                      "max_abs_logits_difference": diff, "max_abs_weight_difference": weights}))


if __name__ == "__main__":
    if len(sys.argv) >= 2 and sys.argv[1] == "make" and all(n in FIXTURES for n in sys.argv[3:]):
        make(sys.argv[2] if len(sys.argv) >= 3 else os.path.join(os.path.dirname(__file__), "..", "..", "hf", "testdata"), sys.argv[3:])
    elif len(sys.argv) >= 2 and sys.argv[1] == "greedy" and all(n in FIXTURES for n in sys.argv[3:]):
        greedy(sys.argv[2] if len(sys.argv) >= 3 else os.path.join(os.path.dirname(__file__), "..", "..", "hf", "testdata"), sys.argv[3:])
    elif len(sys.argv) == 4 and sys.argv[1] == "compare":
        compare(sys.argv[2], sys.argv[3])
    elif len(sys.argv) == 4 and sys.argv[1] == "loss":
        loss(sys.argv[2], sys.argv[3])
    else:
        sys.exit(__doc__)
