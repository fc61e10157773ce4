"""The PEFT fixtures of onegpu's LoRA adapters, made and checked with transformers and peft.

    python peft_fixture.py make [OUT]              # writes the adapters below into OUT (default hf/testdata/peft)
    python peft_fixture.py loss BASE ADAPTER TOKENS.npy
                                                   # PeftModel.from_pretrained(BASE, ADAPTER): its mean
                                                   # next-token cross-entropy of the ids, as onegpu eval --json
                                                   # prints it, and the keys it found missing or unexpected
    python peft_fixture.py merged MERGED BASE ADAPTER TOKENS.npy
                                                   # the loss of a merged export (onegpu train --export-hf
                                                   # --merge) next to PEFT's merge_and_unload of the adapter

Each fixture is an adapter folder that peft's save_pretrained wrote (adapter_config.json,
adapter_model.safetensors) for one of the base fixtures of make_fixture.py, and beside it
FIXTURE.logits.safetensors with the base fixture's "tokens" and the adapted model's float32
"logits". PEFT initializes B to zero (the adapted model equals the base); the fixtures draw B from a
normal distribution instead, so that a misread A, B, scaling or target shows in the logits.

Install as reference/hf/requirements.txt says, plus peft (reference/hf/requirements-peft.txt).
"""
import json
import os
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # everything is local; never reach for the hub

import numpy as np
import torch
from peft import LoraConfig, PeftModel, get_peft_model
from safetensors.numpy import load_file, save_file
from transformers import AutoModelForCausalLM

HERE = os.path.dirname(os.path.abspath(__file__))
TESTDATA = os.path.join(HERE, "..", "..", "hf", "testdata")

FIXTURES = {
    # Every projection of the untied Llama 3 fixture, rsLoRA scaling (alpha/sqrt(r)).
    "llama3_untied_lora": dict(base="llama3_untied", seed=3,
                               config=dict(r=4, lora_alpha=8, use_rslora=True, lora_dropout=0.0,
                                           target_modules=["q_proj", "k_proj", "v_proj", "o_proj",
                                                           "gate_proj", "up_proj", "down_proj"])),
    # PEFT's default targets (q_proj, v_proj) on the tied bfloat16 fixture, plain scaling (alpha/r).
    "tied_bf16_sharded_lora": dict(base="tied_bf16_sharded", seed=4,
                            config=dict(r=2, lora_alpha=6, lora_dropout=0.1, target_modules=["q_proj", "v_proj"])),
}


def logits_of(model, tokens):
    with torch.no_grad():
        return model(torch.from_numpy(tokens)).logits.float().numpy()


def make(out):
    os.makedirs(out, exist_ok=True)
    for name, spec in FIXTURES.items():
        base_dir = os.path.join(TESTDATA, spec["base"])
        base = AutoModelForCausalLM.from_pretrained(base_dir, dtype=torch.float32).eval()
        torch.manual_seed(spec["seed"])
        model = get_peft_model(base, LoraConfig(task_type="CAUSAL_LM", **spec["config"]))
        with torch.no_grad():
            for pname, p in model.named_parameters():
                if "lora_B" in pname:
                    p.copy_(0.3 * torch.randn_like(p))
        folder = os.path.join(out, name)
        model.save_pretrained(folder)
        os.remove(os.path.join(folder, "README.md"))  # peft's model card: the fixture needs none
        config_path = os.path.join(folder, "adapter_config.json")
        with open(config_path) as f:
            config = json.load(f)
        config["base_model_name_or_path"] = spec["base"]  # not this machine's path
        with open(config_path, "w") as f:
            json.dump(config, f, indent=2, sort_keys=True)
        # The reference logits come from the saved adapter, loaded as users load one.
        fresh = AutoModelForCausalLM.from_pretrained(base_dir, dtype=torch.float32)
        reloaded = PeftModel.from_pretrained(fresh, folder).eval()
        tokens = load_file(base_dir + ".logits.safetensors")["tokens"]
        logits = logits_of(reloaded, tokens)
        save_file({"tokens": tokens, "logits": logits}, os.path.join(out, name + ".logits.safetensors"))
        print(f"{name}: on {spec['base']}, files {sorted(os.listdir(folder))}, logits {list(logits.shape)} "
              f"in [{logits.min():.3f}, {logits.max():.3f}]")


def mean_loss(model, tokens_npy):
    tokens = torch.from_numpy(np.load(tokens_npy).astype(np.int64))
    with torch.no_grad():
        return float(model(tokens, labels=tokens).loss), int(tokens.shape[0] * (tokens.shape[1] - 1))


def loss(base, adapter, tokens_npy):
    model = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32)
    model, info = PeftModel.from_pretrained(model, adapter, is_trainable=False), None
    # from_pretrained warns about mismatched keys; load_adapter reports them: check both ways.
    model.eval()
    check = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32)
    check = PeftModel.from_pretrained(check, adapter)
    result = check.load_adapter(adapter, adapter_name="check")
    mean, count = mean_loss(model, tokens_npy)
    print(json.dumps({"loss": mean, "tokens": count, "missing_keys": [k for k in result.missing_keys if "lora_" in k and ".check." in k],
                      "unexpected_keys": list(result.unexpected_keys)}))


def merged(merged_dir, base, adapter, tokens_npy):
    ours = AutoModelForCausalLM.from_pretrained(merged_dir, dtype=torch.float32).eval()
    peft = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32), adapter)
    peft = peft.merge_and_unload().eval()
    a, count = mean_loss(ours, tokens_npy)
    b, _ = mean_loss(peft, tokens_npy)
    weights = max(float((p - peft.state_dict()[k]).abs().max()) for k, p in ours.state_dict().items())
    print(json.dumps({"merged_loss": a, "peft_merged_loss": b, "tokens": count, "max_abs_weight_difference": weights}))


if __name__ == "__main__":
    if len(sys.argv) in (2, 3) and sys.argv[1] == "make":
        make(sys.argv[2] if len(sys.argv) == 3 else os.path.join(TESTDATA, "peft"))
    elif len(sys.argv) == 5 and sys.argv[1] == "loss":
        loss(*sys.argv[2:])
    elif len(sys.argv) == 6 and sys.argv[1] == "merged":
        merged(*sys.argv[2:])
    else:
        sys.exit(__doc__)
