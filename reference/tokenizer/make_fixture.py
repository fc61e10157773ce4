"""The reference fixtures of onegpu's tokenizer package, made with the Python `tokenizers` package (the
Rust library that transformers uses; pinned in reference/hf/requirements.txt, installed in /work/hfvenv).

    python make_fixture.py make [OUT]   # writes the fixtures below into OUT (default tokenizer/testdata)
    python make_fixture.py bench [OUT]  # encode throughput on one core: the Rust library next to onegpu's Go

What it writes (the Go tests read them; CI needs no Python):
  stress.txt                generated lines (seeded) that the hand-written corpus.txt does not cover: every
                            kind of whitespace, Unicode 16 letters and digits, combining marks, emoji, the
                            special tokens' text and fragments of it, and invalid UTF-8 (raw bytes)
  VARIANT/tokenizer.json    a tokenizer as the Rust library serializes it, with one model family's exact
                            normalizer, pre-tokenizer, post-processor and decoder settings (variants()) and
                            a vocabulary trained here on a few MB of text (the corpus, Go's sources and
                            Opticks, CPython's CJK test texts). The trainer breaks ties in hash order, so
                            each run learns a slightly different vocabulary: rerun, commit all of it.
  VARIANT/expected.jsonl.gz the reference's output for every case (below): {"ids"} with
                            add_special_tokens=False, plus {"decoded"} / {"decoded_skip"} (decode without /
                            with skip_special_tokens) where they differ from the case's text; first a header
                            with the template's {"prefix", "suffix"} (encode with add_special_tokens=True
                            equals prefix + ids + suffix for every case: asserted here); after the cases,
                            {"decode": ids} lines with random ids (some out of range) and their decodes
  pretokenize/NAME.txt      for the Llama 3, Qwen2 and GPT-2 split patterns, each case's pieces as UTF-8
                            byte lengths (one line a case)
  pretokenize/configs.jsonl.gz  more pre-tokenizers (pretokenizer_configs()), each with its pieces of every
                            seventh case
  decoders.jsonl.gz         random token lists, then each of more decoders (decoder_configs()) with its texts
  llama3/tokenizer_config.json, generation_config.json: BOS and EOS as a Hugging Face folder names them
  manifest.json             versions, the training text's size and sha256, vocabulary sizes
  ../unicode_tables.go      the reference's character classes, probed code point by code point: \\s, \\p{L}
                            and \\p{N} of its regex engine (Oniguruma, Unicode 16; Go's tables are Unicode
                            15), \\w of Rust's regex crate (single_word added tokens), and the characters its
                            NFC (Unicode 10 tables) takes for starters

Cases: corpus.txt and stress.txt, each split on "\\n" (a trailing empty piece dropped), then each run of 8
consecutive lines joined with "\\n". A case's text is its bytes decoded as UTF-8 with errors="replace":
each maximal invalid subsequence becomes one U+FFFD, as Rust's String::from_utf8_lossy does. The Rust
library only takes valid UTF-8 (a str), so that is what it does to bytes; the Go package applies the same
replacement to a string that is not valid UTF-8.
"""
import glob
import gzip
import hashlib
import json
import os
import random
import sys
import sysconfig
import time

os.environ["TOKENIZERS_PARALLELISM"] = "false"  # one core: encode_batch runs sequentially
os.environ.setdefault("RAYON_NUM_THREADS", "1")

import tokenizers
from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))

LLAMA3 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
          r"|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
         r"|\s*[\r\n]+|\s+(?!\S)|\s+")
GPT2 = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"
PATTERNS = {"llama3": LLAMA3, "qwen2": QWEN2, "gpt2": GPT2}

# Byte-level family (Llama 3, Qwen2): a model vocabulary of 1000 (the 256 byte symbols, merges, and a few
# tokens no merge reaches, which only ignore_merges finds), then 24 added tokens: Llama 3.1's first
# specials in its order, tokens that exercise lstrip, rstrip, single_word and normalized, Qwen2's
# specials, reserved specials up to 1024 in all.
BYTE_MODEL_VOCAB = 1000
UNREACHABLE = ["Ġtokenizer", "Ġexactly", "Ġmemory", "ĠGPU", "Ġrematerialization", "Ġ1234", "ĠParis"]
BYTE_ADDED = (
    [dict(content=c, special=True) for c in [
        "<|begin_of_text|>", "<|end_of_text|>", "<|reserved_special_token_0|>", "<|reserved_special_token_1|>",
        "<|finetune_right_pad_id|>", "<|reserved_special_token_2|>", "<|start_header_id|>", "<|end_header_id|>",
        "<|eom_id|>", "<|eot_id|>", "<|python_tag|>"]]
    + [dict(content="<mask>", special=True, lstrip=True),
       dict(content="<|tool|>", special=True, rstrip=True),
       dict(content="onegpu", special=False, single_word=True),
       dict(content="<|endoftext|>", special=True), dict(content="<|im_start|>", special=True),
       dict(content="<|im_end|>", special=True),
       dict(content="café", special=False, normalized=True)]
    + [dict(content=f"<|reserved_special_token_{i}|>", special=True) for i in range(3, 9)])

# SentencePiece family (Llama 2, TinyLlama, Mistral): <unk> <s> </s>, the 256 <0xNN> byte tokens, merges
# up to 1022, then two added tokens (a special one and a normalized plain one): 1024 in all.
SP_MODEL_VOCAB = 1022
SP_SPECIALS = ["<unk>", "<s>", "</s>"]
SP_ADDED = ([dict(content=c, special=True) for c in SP_SPECIALS]
            + [dict(content="<pad>", special=True), dict(content="New York", special=False, normalized=True)])


def added_token(d, i):
    special = d["special"]
    return dict(id=i, content=d["content"], single_word=d.get("single_word", False), lstrip=d.get("lstrip", False),
                rstrip=d.get("rstrip", False), normalized=d.get("normalized", not special), special=special)


def template(bos, eos=None, ids=None):
    single = [{"SpecialToken": {"id": bos, "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}]
    pair = single + [{"SpecialToken": {"id": bos, "type_id": 1}}, {"Sequence": {"id": "B", "type_id": 1}}]
    special = {bos: {"id": bos, "ids": [ids[bos]], "tokens": [bos]}}
    if eos:
        single = single + [{"SpecialToken": {"id": eos, "type_id": 0}}]
        pair = pair + [{"SpecialToken": {"id": eos, "type_id": 1}}]
        special[eos] = {"id": eos, "ids": [ids[eos]], "tokens": [eos]}
    return {"type": "TemplateProcessing", "single": single, "pair": pair, "special_tokens": special}


def split(pattern):
    return {"type": "Split", "pattern": {"Regex": pattern}, "behavior": "Isolated", "invert": False}


def byte_level(add_prefix_space, trim_offsets, use_regex):
    return {"type": "ByteLevel", "add_prefix_space": add_prefix_space, "trim_offsets": trim_offsets,
            "use_regex": use_regex}


SP_DECODER = {"type": "Sequence", "decoders": [
    {"type": "Replace", "pattern": {"String": "▁"}, "content": " "}, {"type": "ByteFallback"}, {"type": "Fuse"},
    {"type": "Strip", "content": " ", "start": 1, "stop": 0}]}


def variants(byte_ids, sp_ids):
    """Each variant's pipeline, as the published tokenizer.json files of its family have it."""
    return {
        # meta-llama/Llama-3.1-8B, Llama-3.2-1B: Split with the Llama 3 pattern, then ByteLevel; <|begin_of_text|>.
        "llama3": dict(base="byte", ignore_merges=True, normalizer=None,
                       pre_tokenizer={"type": "Sequence", "pretokenizers": [
                           split(LLAMA3), byte_level(False, True, False)]},
                       post_processor={"type": "Sequence", "processors": [
                           byte_level(True, False, True), template("<|begin_of_text|>", ids=byte_ids)]},
                       decoder=byte_level(True, True, True)),
        # Qwen/Qwen2.5-0.5B: NFC, the Qwen2 pattern (one digit a piece), no template.
        "qwen2": dict(base="byte", ignore_merges=False, normalizer={"type": "NFC"},
                      pre_tokenizer={"type": "Sequence", "pretokenizers": [
                          split(QWEN2), byte_level(False, False, False)]},
                      post_processor=byte_level(False, False, False), decoder=byte_level(False, False, False)),
        # meta-llama/Llama-2-7b-hf, TinyLlama, mistralai/Mistral-7B-v0.1 (legacy): "▁" prepended and spaces
        # replaced by the normalizer, no pre-tokenizer, byte fallback, <s>.
        "llama2": dict(base="sp", normalizer={"type": "Sequence", "normalizers": [
                           {"type": "Prepend", "prepend": "▁"},
                           {"type": "Replace", "pattern": {"String": " "}, "content": "▁"}]},
                       pre_tokenizer=None, post_processor=template("<s>", ids=sp_ids), decoder=SP_DECODER),
        # transformers 5's LlamaTokenizer (legacy=False): Metaspace, prepended to the first piece only.
        "llama2_metaspace": dict(base="sp", normalizer=None,
                                 pre_tokenizer={"type": "Metaspace", "replacement": "▁", "prepend_scheme": "first",
                                                "split": False},
                                 post_processor=template("<s>", ids=sp_ids), decoder=SP_DECODER),
        # Older SentencePiece conversions (Pegasus, early Mistral files): Metaspace that splits, the
        # Metaspace decoder; a template with both <s> and </s>.
        "metaspace_split": dict(base="sp", normalizer=None,
                                pre_tokenizer={"type": "Metaspace", "replacement": "▁", "prepend_scheme": "always",
                                               "split": True},
                                post_processor=template("<s>", "</s>", ids=sp_ids),
                                decoder={"type": "Metaspace", "replacement": "▁", "prepend_scheme": "always",
                                         "split": True}),
        # GPT-2 / RoBERTa: the ByteLevel pre-tokenizer's own regex, here with add_prefix_space.
        "gpt2": dict(base="byte", ignore_merges=False, normalizer=None, pre_tokenizer=byte_level(True, True, True),
                     post_processor=byte_level(True, True, True), decoder=byte_level(True, True, True)),
    }


PIECES_STRIDE = 7  # pretokenize/configs.jsonl.gz holds every 7th case


def pretokenizer_configs():
    """Pre-tokenizers the variants do not use as such, each checked alone on the cases: every Split
    behavior with and without invert (a String pattern, and a known regex), every Metaspace scheme,
    ByteLevel with a prefix space, and a Sequence where Metaspace's "first" sees split pieces."""
    P = pre_tokenizers
    out = []
    for behavior in ["removed", "isolated", "merged_with_previous", "merged_with_next", "contiguous"]:
        for invert in [False, True]:
            out.append(P.Split(" ", behavior, invert=invert))
    # A known regex matches everywhere: the generic path, not the fast one, with two behaviors.
    out.append(P.Split(Regex(LLAMA3), "merged_with_next", invert=True))
    out.append(P.Split(Regex(GPT2), "contiguous", invert=False))
    for scheme in ["always", "first", "never"]:
        for split in [True, False]:
            out.append(P.Metaspace(replacement="▁", prepend_scheme=scheme, split=split))
    out.append(P.ByteLevel(add_prefix_space=True, use_regex=True))
    out.append(P.ByteLevel(add_prefix_space=True, use_regex=False))
    out.append(P.Sequence([P.Split("-", "isolated"), P.Metaspace(replacement="▁", prepend_scheme="first", split=True)]))
    out.append(P.Sequence([P.Split(Regex(QWEN2), "isolated"), P.ByteLevel(add_prefix_space=False, use_regex=False)]))
    return out


def decoder_configs():
    """Decoders the variants do not use as such, each checked alone on token lists."""
    D = decoders
    return [D.Strip(content=" ", left=2, right=2), D.Strip(content="▁", left=1, right=0),
            D.Metaspace(replacement="▁", prepend_scheme="never"), D.Metaspace(replacement="▁", prepend_scheme="first"),
            D.Replace("▁", " "), D.Replace("ab", "X"), D.ByteFallback(), D.Fuse(), D.ByteLevel(),
            D.Sequence([D.ByteFallback(), D.Metaspace(replacement="▁", prepend_scheme="always"), D.Strip(" ", 1, 1)])]


def decoded_or_none(dec, tokens):
    """The decoder's text, or None where the reference panics (Strip on a token of fewer characters than
    it strips: Rust slices out of range)."""
    try:
        return dec.decode(tokens)
    except BaseException as e:  # pyo3's PanicException derives from BaseException
        if type(e).__name__ != "PanicException":
            raise
        return None


def component_json(key, obj):
    tok = Tokenizer(models.BPE())
    setattr(tok, key, obj)
    return json.loads(tok.to_str())[key]


# ---------------------------------------------------------------------------------------------------------
# Text


def stress_lines():
    """Lines (bytes) mixing every character class the patterns and normalizers distinguish."""
    rng = random.Random(35)
    spaces = [" ", "  ", "   ", "\t", "\u00a0", "\u2009", "\u3000", "\u2028", "\u2029", "\u0085", "\x0b", "\x0c",
              "\u200b", "\ufeff", "\u180e", "\u1680", "\r", " \r", "\t\t", "        "]
    words = ["hello", "World", "the", "GPU", "naïve", "Straße", "façade", "ǅemal", "ſtraße", "İstanbul", "ıi",
             "αβγ", "ΣΊΣΥΦΟΣ", "жизнь", "Ёж", "שלום", "مرحبا", "नमस्ते", "ক্ষ", "สวัสดี", "中文字", "ひらがな",
             "カタカナ", "한국어", "ქართ", "ሰላም", "𝔘𝔫𝔦", "𐍈𐌰", "a\u0301", "e\u0308\u0323", "\u0301\u0302",
             "cafe\u0301", "café", "CAFÉ", "\u1100\u1161\u11a8", "\U00011935\U00011930", "\U00011938",
             "\u1c89\u1c8a", "\U000105c0x", "\U00010d40\U00010d41", "\u0378", "\U00050000", "\ue000",
             "\U000f0000", "\ufffe", "\uffff", "\ufffd", "\u00ad", "\u200d", "\u200c", "ﬁ", "Å", "K", "ß",
             "ǲ", "Ⅻ", "x²", "½", "①", "٣٤٥", "०१२", "１２", "𝟘𝟙", "0", "7", "42", "123", "4567", "89012",
             "3.14", "1,000", "1e-5", "v1.2.3", "'s", "'S", "'t", "'re", "'VE", "'m", "'ll", "'LL", "'d", "'ſ",
             "'K", "'x", "’s", "''", "'", "\"", "`", "--", "...", "!?", "->", "=>", "{}", "()", "[]", "<>", "//",
             "#", "@", "$", "%", "^", "&", "*", "_", "+", "=", "|", "\\", "~", "😀", "👍🏽", "👨‍👩‍👧", "🇫🇷",
             "❤️", "1️⃣", "🏳️‍🌈", "<|eot_id|>", "<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>",
             "<|eot_id", "|eot_id|>", "<|", "|>", "<s>", "</s>", "<unk>", "<pad>", "<mask>", "<|tool|>",
             "onegpu", "onegpux", "xonegpu", "_onegpu", "onegpu_", "1onegpu", "éonegpu", "New York", "New  York",
             "new york", "<|im_start|>", "<|im_end|>", "<|endoftext|>", "<0x41>", "<0xE4>", "▁", "▁▁", "▁x",
             "Ġ", "Ċ", "ĉ", "Ā", "ÿ", "\u0100\u0120", "'ſa", "'Sa", "'LLa", "'lL", "'rE", "'Ve", "'Dx",
             "a\u0301\u1ac0\u0323", "\u07fd\u0301", "o\u0323\u0302\U00011930", "e\u0302\u0323"]
    lines = []
    for _ in range(320):
        parts = []
        for _ in range(rng.randint(1, 14)):
            r = rng.random()
            if r < 0.55:
                parts.append(rng.choice(words))
            elif r < 0.85:
                parts.append(rng.choice(spaces))
            else:
                parts.append("".join(rng.choice("abcXYZ019 '.,;:-_\t") for _ in range(rng.randint(1, 6))))
        if rng.random() < 0.1:
            parts.append("\r")
        lines.append("".join(parts).encode())
    invalid = [b"\xff", b"\xfe", b"\xc0\xaf", b"\xc3", b"\xe2\x82", b"\xed\xa0\x80", b"\xf0\x9f\x98", b"\xf4\x90\x80\x80",
               b"\x80", b"\xbf\xbf", b"\xf8\x88\x80\x80\x80", b"\xe0\x80\x80", b"\xc3(", b"\xe2\x28\xa1", b"\xf0\x28\x8c\xbc",
               b"\xc2", b"\xef\xbf"]
    for i, bad in enumerate(invalid):
        lines.append(b"invalid " + bad + b" byte" + bad + b"s" + bad)
        lines.append(bad + rng.choice(words).encode() + b" " + bad + bad + b"<|eot_id|>" + bad)
    lines.append(b"")
    lines.append(b" ")
    lines.append(b"\t")
    lines.append(b"\r")
    lines.append(b"          ")
    lines.append(b"a" * 300)  # longer than the Rust BPE cache's 256-byte words
    lines.append(("ab " * 5 + "é" * 100 + " 😀" * 10).encode())
    return lines


def cases_of(data):
    lines = data.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    blocks = [b"\n".join(lines[i:i + 8]) for i in range(0, len(lines), 8)]
    return lines + blocks


def all_cases(out):
    raw = []
    for name in ["corpus.txt", "stress.txt"]:
        with open(os.path.join(out, name), "rb") as f:
            raw += cases_of(f.read())
    return raw, [r.decode("utf-8", errors="replace") for r in raw]


def training_text(out):
    """A few MB: the corpus (three times), Opticks and Go's standard library sources (GOROOT), CPython's
    CJK test texts. Returned as lines, with the sha256 of what was read, so a rerun can tell."""
    goroot = os.popen("go env GOROOT").read().strip()
    files = [os.path.join(out, "corpus.txt")] * 3 + [os.path.join(out, "stress.txt")]
    files += [os.path.join(goroot, "src/testdata/Isaac.Newton-Opticks.txt")]
    for pkg in ["fmt", "strings", "bytes", "strconv", "unicode/utf8", "encoding/json", "net/http", "sort", "bufio",
                "text/template", "go/parser", "regexp/syntax"]:
        files += sorted(f for f in glob.glob(os.path.join(goroot, "src", pkg, "*.go")))
    files += sorted(glob.glob(os.path.join(sysconfig.get_paths()["stdlib"], "test/cjkencodings/*-utf8.txt")))
    h = hashlib.sha256()
    lines = []
    for path in files:
        with open(path, "rb") as f:
            data = f.read()
        h.update(data)
        lines += data.decode("utf-8", errors="replace").splitlines()
    size = sum(len(l) + 1 for l in lines)
    return lines, dict(files=len(files), chars=size, sha256=h.hexdigest(), goroot=goroot)


# ---------------------------------------------------------------------------------------------------------
# Tokenizers


def train_byte_level(lines):
    tok = Tokenizer(models.BPE(ignore_merges=True))
    tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(LLAMA3), "isolated"),
                                                 pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    trainer = trainers.BpeTrainer(vocab_size=BYTE_MODEL_VOCAB - len(UNREACHABLE), min_frequency=2,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(lines, trainer)
    model = json.loads(tok.to_str())["model"]
    vocab = dict(model["vocab"])
    for t in UNREACHABLE:
        assert t not in vocab, f"{t} was learned: pick another unreachable token"
        vocab[t] = len(vocab)
    assert len(vocab) == BYTE_MODEL_VOCAB, len(vocab)
    return vocab, model["merges"]


def train_sentencepiece(lines):
    tok = Tokenizer(models.BPE(unk_token="<unk>", fuse_unk=True, byte_fallback=True))
    # Merges learned within "▁word" pieces, as SentencePiece's trainer splits on whitespace.
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always", split=True)
    learned = SP_MODEL_VOCAB - len(SP_SPECIALS) - 256
    trainer = trainers.BpeTrainer(vocab_size=learned, min_frequency=2, limit_alphabet=160, show_progress=False)
    tok.train_from_iterator(lines, trainer)
    model = json.loads(tok.to_str())["model"]
    vocab = {t: i for i, t in enumerate(SP_SPECIALS)}
    for b in range(256):
        vocab[f"<0x{b:02X}>"] = len(vocab)
    for t, _ in sorted(model["vocab"].items(), key=lambda kv: kv[1]):
        assert t not in vocab, t
        vocab[t] = len(vocab)
    assert len(vocab) == SP_MODEL_VOCAB, len(vocab)
    return vocab, model["merges"]


def build(spec, vocab, merges, added):
    byte = spec["base"] == "byte"
    model = {"type": "BPE", "dropout": None, "unk_token": None if byte else "<unk>",
             "continuing_subword_prefix": None, "end_of_word_suffix": None, "fuse_unk": not byte,
             "byte_fallback": not byte, "ignore_merges": spec.get("ignore_merges", False),
             "vocab": vocab, "merges": merges}
    doc = {"version": "1.0", "truncation": None, "padding": None, "added_tokens": added,
           "normalizer": spec["normalizer"], "pre_tokenizer": spec["pre_tokenizer"],
           "post_processor": spec["post_processor"], "decoder": spec["decoder"], "model": model}
    tok = Tokenizer.from_str(json.dumps(doc))
    for t in added:  # the Rust library assigns added tokens' ids itself: they must agree with the file
        assert tok.token_to_id(t["content"]) == t["id"], t
    return tok


def added_ids(added):
    return {t["content"]: t["id"] for t in added}


def expected(tok, texts, vocab_size, rng):
    rows = []
    prefix = suffix = None
    for text in texts:
        ids = tok.encode(text, add_special_tokens=False).ids
        with_special = tok.encode(text, add_special_tokens=True).ids
        if prefix is None:
            probe = tok.encode("", add_special_tokens=True).ids
            # The template's tokens around an empty sequence: find the split with a non-empty one.
            full = tok.encode("x", add_special_tokens=True).ids
            x = tok.encode("x", add_special_tokens=False).ids
            k = next(i for i in range(len(full)) if full[i:i + len(x)] == x)
            prefix, suffix = full[:k], full[k + len(x):]
            assert probe == prefix + suffix
        assert with_special == prefix + ids + suffix, (text, with_special, ids)
        row = {"ids": ids}
        decoded = tok.decode(ids, skip_special_tokens=False)
        if decoded != text:
            row["decoded"] = decoded
        decoded_skip = tok.decode(ids, skip_special_tokens=True)
        if decoded_skip != text:
            row["decoded_skip"] = decoded_skip
        rows.append(row)
    for _ in range(300):
        n = rng.randint(1, 12)
        ids = [rng.randrange(vocab_size + 2) for _ in range(n)]  # a few ids beyond the vocabulary
        rows.append({"decode": ids, "text": tok.decode(ids, skip_special_tokens=False),
                     "text_skip": tok.decode(ids, skip_special_tokens=True)})
    return {"prefix": prefix, "suffix": suffix}, rows


# ---------------------------------------------------------------------------------------------------------
# Character classes


def class_members(pattern):
    cps = [c for c in range(0x110000) if not (0xD800 <= c <= 0xDFFF)]
    sp = pre_tokenizers.Split(Regex(pattern), behavior="removed", invert=True)  # keeps the matches
    members = []
    for i in range(0, len(cps), 50000):
        chunk = cps[i:i + 50000]
        for _, (a, b) in sp.pre_tokenize_str("".join(map(chr, chunk))):
            members += chunk[a:b]
    return members


def word_members():
    """Rust regex's \\w, as the single_word added token "onegpu" sees it: "Xonegpu " is the added token
    exactly when X is not a word character."""
    tok = Tokenizer(models.BPE())
    tok.add_tokens([AddedToken("onegpu", single_word=True, normalized=False)])
    cps = [c for c in range(0x110000) if not (0xD800 <= c <= 0xDFFF)]
    members = []
    for i in range(0, len(cps), 20000):
        chunk = cps[i:i + 20000]
        text = "".join(chr(c) + "onegpu " for c in chunk)
        enc = tok.encode(text, add_special_tokens=False)
        matched = {a // 8 for (a, _), t in zip(enc.offsets, enc.ids) if t == 0}
        members += [c for j, c in enumerate(chunk) if j not in matched]
    return members


def nfc_reference_starters():
    """The characters the reference's NFC (Unicode 10 tables) takes for starters that compose with
    nothing, where Unicode 15's (Go's golang.org/x/text, Python's unicodedata) do not: combining
    marks it does not reorder, and U+11930, which it does not compose with U+11935."""
    import unicodedata
    n = normalizers.NFC()
    out = []
    for c in range(0x110000):
        if 0xD800 <= c <= 0xDFFF or not unicodedata.combining(chr(c)):
            continue
        s = "a" + chr(c) + "\u0334" if unicodedata.combining(chr(c)) > 1 else "a\u0301" + chr(c)
        if n.normalize_str(s) == s:
            out.append(c)
    assert n.normalize_str("\U00011935\U00011930") == "\U00011935\U00011930"
    return out + [0x11930]


def ranges(members):
    out = []
    for c in sorted(members):
        if out and out[-1][1] == c - 1:
            out[-1][1] = c
        else:
            out.append([c, c])
    return out


def go_table(name, doc, members):
    rs = ranges(members)
    r16 = [r for r in rs if r[1] <= 0xFFFF]
    r32 = [r for r in rs if r[0] > 0xFFFF]
    for r in rs:
        assert r in r16 or r in r32, "a range across U+FFFF"
    latin = sum(1 for r in r16 if r[1] <= 0xFF)
    lines = [f"// {doc}", f"var {name} = &unicode.RangeTable{{", "\tR16: []unicode.Range16{"]
    lines += [f"\t\t{{0x{a:04x}, 0x{b:04x}, 1}}," for a, b in r16]
    lines += ["\t},", "\tR32: []unicode.Range32{"]
    lines += [f"\t\t{{0x{a:x}, 0x{b:x}, 1}}," for a, b in r32]
    lines += ["\t},", f"\tLatinOffset: {latin},", "}", ""]
    return "\n".join(lines)


def write_tables(path):
    tables = [
        ("classSpace", "classSpace is the reference's \\s: White_Space.", class_members(r"\s")),
        ("classLetter", "classLetter is the reference's \\p{L}.", class_members(r"\p{L}")),
        ("classNumber", "classNumber is the reference's \\p{N}.", class_members(r"\p{N}")),
        ("classWord", "classWord is Rust regex's \\w, which single_word added tokens look at.", word_members()),
        ("nfcReferenceStarters", "nfcReferenceStarters are the characters the reference's NFC takes for starters that "
         "compose with nothing (its tables are Unicode 10).", nfc_reference_starters()),
    ]
    with open(path, "w") as f:
        f.write(f"// Code generated by reference/tokenizer/make_fixture.py from tokenizers {tokenizers.__version__}; "
                "DO NOT EDIT.\n\npackage tokenizer\n\nimport \"unicode\"\n\n")
        f.write("\n".join(go_table(*t) for t in tables))
    os.system(f"gofmt -w {path}")
    return {name: len(m) for name, _, m in tables}


# ---------------------------------------------------------------------------------------------------------


def make(out):
    with open(os.path.join(out, "stress.txt"), "wb") as f:
        f.write(b"\n".join(stress_lines()) + b"\n")
    raw, texts = all_cases(out)
    lines, source = training_text(out)
    print(f"training text: {source['chars']:,} characters from {source['files']} files")
    t0 = time.time()
    byte_vocab, byte_merges = train_byte_level(lines)
    sp_vocab, sp_merges = train_sentencepiece(lines)
    print(f"trained in {time.time() - t0:.1f} s: byte-level {len(byte_vocab)} ({len(byte_merges)} merges), "
          f"sentencepiece {len(sp_vocab)} ({len(sp_merges)} merges)")
    byte_added = [added_token(d, BYTE_MODEL_VOCAB + i) for i, d in enumerate(BYTE_ADDED)]
    sp_added = [added_token(d, sp_vocab[d["content"]] if d["content"] in sp_vocab else SP_MODEL_VOCAB + i - 3)
                for i, d in enumerate(SP_ADDED)]
    manifest = {"tokenizers": tokenizers.__version__, "cases": len(texts), "training": source, "variants": {}}
    for name, spec in variants(added_ids(byte_added), added_ids(sp_added)).items():
        byte = spec["base"] == "byte"
        vocab, merges, added = (byte_vocab, byte_merges, byte_added) if byte else (sp_vocab, sp_merges, sp_added)
        tok = build(spec, vocab, merges, added)
        folder = os.path.join(out, name)
        os.makedirs(folder, exist_ok=True)
        with open(os.path.join(folder, "tokenizer.json"), "w") as f:
            f.write(tok.to_str(pretty=True))
        header, rows = expected(tok, texts, tok.get_vocab_size(with_added_tokens=True), random.Random(name))
        with gzip.GzipFile(os.path.join(folder, "expected.jsonl.gz"), "wb", mtime=0) as f:
            f.write((json.dumps(header, separators=(",", ":")) + "\n").encode())
            for row in rows:
                f.write((json.dumps(row, ensure_ascii=False, separators=(",", ":")) + "\n").encode())
        info = dict(vocab=tok.get_vocab_size(with_added_tokens=True), model_vocab=len(vocab),
                    tokens=sum(len(r.get("ids", [])) for r in rows),
                    round_trip_differs=sum(1 for r in rows if "decoded" in r))
        if byte and spec["ignore_merges"]:
            # How many cases ignore_merges changes (the unreachable tokens make sure some do).
            plain = json.loads(tok.to_str())
            plain["model"]["ignore_merges"] = False
            other = Tokenizer.from_str(json.dumps(plain))
            info["ignore_merges_changes"] = sum(
                1 for t in texts if other.encode(t, add_special_tokens=False).ids != tok.encode(t, add_special_tokens=False).ids)
        manifest["variants"][name] = info
        print(name, info)
    # A Hugging Face folder's other two files, for Load(dir) on the Llama 3 fixture.
    with open(os.path.join(out, "llama3", "tokenizer_config.json"), "w") as f:
        json.dump({"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>", "add_bos_token": True,
                   "tokenizer_class": "PreTrainedTokenizerFast"}, f, indent=2)
        f.write("\n")
    with open(os.path.join(out, "llama3", "generation_config.json"), "w") as f:
        json.dump({"bos_token_id": BYTE_MODEL_VOCAB,
                   "eos_token_id": [BYTE_MODEL_VOCAB + 1, BYTE_MODEL_VOCAB + 8, BYTE_MODEL_VOCAB + 9]}, f, indent=2)
        f.write("\n")
    os.makedirs(os.path.join(out, "pretokenize"), exist_ok=True)
    for name, pattern in PATTERNS.items():
        sp = pre_tokenizers.Split(Regex(pattern), "isolated")
        with open(os.path.join(out, "pretokenize", name + ".txt"), "w") as f:
            for text in texts:
                pieces = [len(p.encode()) for p, _ in sp.pre_tokenize_str(text)]
                assert sum(pieces) == len(text.encode())
                f.write(" ".join(map(str, pieces)) + "\n")
    with gzip.GzipFile(os.path.join(out, "pretokenize", "configs.jsonl.gz"), "wb", mtime=0) as f:
        for pre in pretokenizer_configs():
            pieces = [[p for p, _ in pre.pre_tokenize_str(t)] for t in texts[::PIECES_STRIDE]]
            f.write((json.dumps({"pre_tokenizer": component_json("pre_tokenizer", pre), "pieces": pieces},
                                ensure_ascii=False) + "\n").encode())
    rng = random.Random("decoders")
    pool = [t for t in sp_vocab] + [t for t in byte_vocab] + [" ", "  ", "▁", "▁▁", "a▁b", "ab", "abab", "<0x20>",
                                                            "<0xE4>", "<0xB8>", "<0xAD>", "<0x+F>", "<0xZZ>", ""]
    token_lists = [[rng.choice(pool) for _ in range(rng.randint(0, 8))] for _ in range(400)]
    with gzip.GzipFile(os.path.join(out, "decoders.jsonl.gz"), "wb", mtime=0) as f:
        f.write((json.dumps({"tokens": token_lists}, ensure_ascii=False) + "\n").encode())
        for dec in decoder_configs():
            f.write((json.dumps({"decoder": component_json("decoder", dec),
                                 "texts": [decoded_or_none(dec, ts) for ts in token_lists]},
                                ensure_ascii=False) + "\n").encode())
    manifest["classes"] = write_tables(os.path.join(out, "..", "unicode_tables.go"))
    with open(os.path.join(out, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1)
        f.write("\n")


def bench(out):
    """Encode throughput on one core, the Rust library's (TOKENIZERS_PARALLELISM=false, RAYON_NUM_THREADS=1;
    encode_batch_fast, which skips offsets) next to onegpu's Go benchmark (BenchmarkEncode, -cpu 1), run
    alternately in rounds so that both see the same machine load; each side's best round, in MB of text per
    second of CPU time (the process's user + system time; wall time is printed too, but on a shared machine
    it measures the load). Inputs: every case of the corpus, and Go's Isaac.Newton-Opticks.txt line by
    line; warm caches on both sides."""
    import re
    import subprocess
    raw, texts = all_cases(out)
    goroot = os.popen("go env GOROOT").read().strip()
    opticks_path = os.path.join(goroot, "src/testdata/Isaac.Newton-Opticks.txt")
    with open(opticks_path, "rb") as f:
        opticks = f.read().decode().split("\n")
    binary = os.path.join(out, "..", "tokenizer.test.bench")
    subprocess.run(["go", "test", "-c", "-o", binary, "."], cwd=os.path.join(out, ".."), check=True)
    names = ["llama3", "qwen2", "llama2", "llama2_metaspace", "metaspace_split", "gpt2"]
    best = {}
    try:
        for _ in range(3):
            for name in names:
                tok = Tokenizer.from_file(os.path.join(out, name, "tokenizer.json"))
                for what, inputs in [("corpus", texts), ("opticks", opticks)]:
                    size = sum(len(t.encode()) for t in inputs)
                    tok.encode_batch_fast(inputs, add_special_tokens=False)  # warm its cache
                    for clock, suffix in [(time.process_time, "rust"), (time.perf_counter, "rust wall")]:
                        t = min(timed(lambda: tok.encode_batch_fast(inputs, add_special_tokens=False), clock)
                                for _ in range(3))
                        key = (name, what, suffix)
                        best[key] = max(best.get(key, 0), size / t / 1e6)
                res = subprocess.run([binary, "-test.run=^$", f"-test.bench=^BenchmarkEncode$/^{name}$/", "-test.cpu=1",
                                      "-test.benchtime=1s", "-tokenizer.text=" + opticks_path],
                                     cwd=os.path.join(out, ".."), capture_output=True, text=True, check=True)
                for line in res.stdout.splitlines():
                    m = re.match(r"BenchmarkEncode/(\w+)/(\S+)\s+\d+\s+[\d.]+ ns/op\s+([\d.]+) MB/s\s+([\d.]+) cpu-MB/s",
                                 line)
                    if m:
                        what = "corpus" if m.group(2) == "corpus" else "opticks"
                        for suffix, value in [("go wall", m.group(3)), ("go", m.group(4))]:
                            key = (m.group(1), what, suffix)
                            best[key] = max(best.get(key, 0), float(value))
    finally:
        os.remove(binary)
    print(f"MB of text per second of CPU time (wall time in brackets), {tokenizers.__version__} vs onegpu, one core")
    print(f"{'variant':17s} {'input':8s} {'Rust':>16s} {'Go':>16s} {'Go/Rust':>8s}")
    for name in names:
        for what in ["corpus", "opticks"]:
            r, g = best[(name, what, "rust")], best[(name, what, "go")]
            rw, gw = best[(name, what, "rust wall")], best[(name, what, "go wall")]
            print(f"{name:17s} {what:8s} {r:7.2f} ({rw:6.2f}) {g:7.2f} ({gw:6.2f}) {g / r:8.2f}")


def timed(fn, clock=time.perf_counter):
    t0 = clock()
    fn()
    return clock() - t0


if __name__ == "__main__":
    cmd = sys.argv[1] if len(sys.argv) > 1 else "make"
    out = sys.argv[2] if len(sys.argv) > 2 else os.path.join(ROOT, "tokenizer", "testdata")
    {"make": make, "bench": bench}[cmd](out)
