"""The text-data fixtures of onegpu (data/, train/), made and checked with tokenizers and transformers.

    python text_fixture.py make      # writes the files below

Writes:
  hf/testdata/llama3_untied/tokenizer.json, tokenizer_config.json
      a byte-level BPE tokenizer with Llama 3's pipeline (its Split pattern, ByteLevel, ignore_merges,
      <|begin_of_text|> template, ByteLevel decoder) of exactly 256 tokens, the fixture model's
      vocabulary: its specials first (ids 0-5, <|begin_of_text|> 1 and <|end_of_text|> 2 as the
      fixture's generation_config.json says), the characters of the training text, merges. Trained on
      data/testdata/genesis_exodus.txt; not every byte has a token (256 would leave no room for merges
      and specials), so characters outside that text are dropped, as the tokenizers library does.
      tokenizer_config.json names BOS and EOS.
  data/testdata/notes.jsonl
      60 prompt/completion records cut from verses of the training text (the first words a prompt,
      the rest its completion), for `onegpu train --data` on the fixture.
  data/testdata/chat.jsonl
      a few conversations ("messages") for the chat templates.
  hf/testdata/llama3_untied.text.json
      what onegpu must reproduce:
      "notes": each record's ids (BOS, the tokenizer's ids of prompt+completion, EOS), which of them
          are trained (a token holding completion text, by the tokenizer's offsets; the EOS), and
          transformers' loss of the record alone with labels -100 on the rest: its mean ("loss",
          LlamaForCausalLM's own) and its sum and count (float64 from the float32 logits);
      "chat": per template ("llama3", "plain"), each conversation's text as transformers'
          apply_chat_template renders it (the template in Jinja), its ids, and its trained tokens
          (apply_chat_template's assistant mask: the {% generation %} spans).

Install as reference/hf/requirements.txt says.
"""
import json
import os
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # everything is local; never reach for the hub

import numpy as np
import torch
from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, processors, trainers
from transformers import AutoModelForCausalLM, PreTrainedTokenizerFast

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..", "..")
FIXTURE = os.path.join(ROOT, "hf", "testdata", "llama3_untied")
CORPUS = os.path.join(ROOT, "data", "testdata", "genesis_exodus.txt")
VOCAB = 256

LLAMA3 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
          r"|\s*[\r\n]+|\s+(?!\S)|\s+")
SPECIALS = ["<|reserved_special_token_0|>", "<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>",
            "<|end_header_id|>", "<|eot_id|>"]

# Meta-Llama-3-8B-Instruct's chat template; the same with {% generation %} around what carries the
# loss (the assistant's content and its <|eot_id|>), which apply_chat_template's assistant mask reads.
LLAMA3_TEMPLATE = (
    "{% set loop_messages = messages %}{% for message in loop_messages %}"
    "{% set content = '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim + '<|eot_id|>' %}"
    "{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}{{ content }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}")
LLAMA3_MASKED = (
    "{{ bos_token }}{% for message in messages %}"
    "{{ '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n' }}"
    "{% if message['role'] == 'assistant' %}{% generation %}{{ message['content'] | trim + '<|eot_id|>' }}{% endgeneration %}"
    "{% else %}{{ message['content'] | trim + '<|eot_id|>' }}{% endif %}{% endfor %}")
# onegpu's plain template (data.ChatTemplate("plain")).
PLAIN_MASKED = (
    "{{ bos_token }}{% for message in messages %}{{ message['role'] + ':\n' }}"
    "{% if message['role'] == 'assistant' %}{% generation %}{{ message['content'] | trim + '\n\n' }}{% endgeneration %}"
    "{% else %}{{ message['content'] | trim + '\n\n' }}{% endif %}{% endfor %}"
    "{% generation %}{{ eos_token }}{% endgeneration %}")

CHATS = [
    [{"role": "user", "content": "Who divided the light from the darkness?"},
     {"role": "assistant", "content": "God divided the light from the darkness.\n"}],
    [{"role": "system", "content": "  Answer in the words of Genesis. "},
     {"role": "user", "content": "What was in the beginning?"},
     {"role": "assistant", "content": "In the beginning God created the heaven and the earth."},
     {"role": "user", "content": "And then?"},
     {"role": "assistant", "content": " And the earth was without form, and void."}],
]


def train_tokenizer():
    tok = Tokenizer(models.BPE(ignore_merges=True))
    tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(LLAMA3), "isolated"),
                                                 pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=VOCAB, min_frequency=2, special_tokens=SPECIALS, show_progress=False)
    with open(CORPUS, encoding="utf-8") as f:
        lines = f.read().splitlines()
    # Lines with their newline, and a line of the chat templates' characters, so that every character
    # the fixtures write has a token.
    tok.train_from_iterator([line + "\n" for line in lines] + ["<>|_\n\n"], trainer)
    tok.post_processor = processors.Sequence([
        processors.ByteLevel(trim_offsets=False),
        processors.TemplateProcessing(single="<|begin_of_text|> $A", pair="<|begin_of_text|> $A <|begin_of_text|> $B",
                                      special_tokens=[("<|begin_of_text|>", 1)])])
    assert tok.get_vocab_size() == VOCAB, tok.get_vocab_size()
    for i, s in enumerate(SPECIALS):
        assert tok.token_to_id(s) == i, (s, tok.token_to_id(s))
    for c in "\n:":
        assert tok.encode(c, add_special_tokens=False).ids, f"{c!r} has no token"
    return tok, lines


def notes(lines):
    """Prompt/completion records: verses of 12 to 40 words, the first third the prompt."""
    out = []
    for i, line in enumerate(lines):
        words = line.split()
        if 12 <= len(words) <= 40 and len(out) < 60 and (i * 7) % 13 < 3:
            cut = len(words) // 3
            # Every third record ends its prompt with a space: the completion's first word then
            # merges with it, across the change.
            if len(out) % 3 == 0:
                out.append({"prompt": " ".join(words[:cut]) + " ", "completion": " ".join(words[cut:])})
            else:
                out.append({"prompt": " ".join(words[:cut]), "completion": " " + " ".join(words[cut:])})
    assert len(out) == 60, len(out)
    return out


def trained_by_offsets(enc, start, end):
    """Tokens holding text in [start, end): what carries the loss."""
    return [int(b < end and e > start) for b, e in enc.offsets]


def loss_alone(model, ids, trained):
    input_ids = torch.tensor([ids])
    labels = torch.tensor([[i if t else -100 for i, t in zip(ids, trained)]])
    with torch.no_grad():
        out = model(input_ids=input_ids, labels=labels)
    logits = out.logits[0, :-1].double()
    target = labels[0, 1:]
    total = torch.nn.functional.cross_entropy(logits, target, ignore_index=-100, reduction="sum")
    return float(out.loss), float(total), int((target != -100).sum())


def make():
    tok, lines = train_tokenizer()
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<|begin_of_text|>", eos_token="<|end_of_text|>")
    fast.save_pretrained(FIXTURE)
    for extra in ["special_tokens_map.json", "chat_template.jinja"]:  # the two files onegpu reads are enough
        path = os.path.join(FIXTURE, extra)
        if os.path.exists(path):
            os.remove(path)
    fast = PreTrainedTokenizerFast.from_pretrained(FIXTURE)
    model = AutoModelForCausalLM.from_pretrained(FIXTURE, dtype=torch.float32).eval()
    records = notes(lines)
    with open(os.path.join(ROOT, "data", "testdata", "notes.jsonl"), "w") as f:
        for r in records:
            f.write(json.dumps(r) + "\n")
    with open(os.path.join(ROOT, "data", "testdata", "chat.jsonl"), "w") as f:
        for c in CHATS:
            f.write(json.dumps({"messages": c}) + "\n")
    expected = {"notes": [], "chat": {}}
    bos, eos = tok.token_to_id("<|begin_of_text|>"), tok.token_to_id("<|end_of_text|>")
    for r in records:
        text = r["prompt"] + r["completion"]
        enc = tok.encode(text, add_special_tokens=False)
        ids = [bos] + enc.ids + [eos]
        trained = [0] + trained_by_offsets(enc, len(r["prompt"]), len(text)) + [1]
        mean, total, count = loss_alone(model, ids, trained)
        expected["notes"].append(dict(ids=ids, trained=trained, loss=mean, loss_sum=total, count=count))
    for name, masked in [("llama3", LLAMA3_MASKED), ("plain", PLAIN_MASKED)]:
        rows = []
        for c in CHATS:
            out = fast.apply_chat_template(c, chat_template=masked, tokenize=True, return_dict=True,
                                           return_assistant_tokens_mask=True)
            text = fast.apply_chat_template(c, chat_template=masked, tokenize=False)
            if name == "llama3":  # the masked template writes what Llama 3's own writes
                assert text == fast.apply_chat_template(c, chat_template=LLAMA3_TEMPLATE, tokenize=False), "the masked template differs"
            assert out["input_ids"] == tok.encode(text, add_special_tokens=False).ids
            rows.append(dict(text=text, ids=out["input_ids"], trained=out["assistant_masks"]))
        expected["chat"][name] = rows
    with open(FIXTURE + ".text.json", "w") as f:
        json.dump(expected, f, indent=1)
        f.write("\n")
    total = sum(n["loss_sum"] for n in expected["notes"])
    count = sum(n["count"] for n in expected["notes"])
    print(f"tokenizer: {tok.get_vocab_size()} tokens; notes: {len(records)} records, "
          f"{sum(len(n['ids']) for n in expected['notes'])} tokens, {count} trained targets, "
          f"completion-only loss {total / count:.6f}")


if __name__ == "__main__":
    if sys.argv[1:] == ["make"]:
        make()
    else:
        sys.exit(__doc__)
