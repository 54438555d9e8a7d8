"""make_tokenizer_fixtures.py: trains the small tokenizers the C tokenizer and
chat template are tested against, and records what the reference Python
libraries produce for them.

No pretrained tokenizer can be fetched, so the fixtures are made here:
  tests/fixtures/sft/tiny.jsonl            templated SFT conversations (a user
                                           asks for a Triton kernel, the
                                           assistant answers with one)
  tests/fixtures/tokenizers/bpe/tokenizer.json
                                           byte-level BPE laid out like Qwen2/3:
                                           NFC, the Qwen2 Split regex, ByteLevel
                                           without its own regex, 507 learned
                                           tokens + 5 added ones = 512 ids
  tests/fixtures/tokenizers/spm/model.model
                                           a sentencepiece unigram model with
                                           the ChatML markers as user symbols
  tests/fixtures/tokenizers/{bpe,spm}/expected.json
                                           ids and decodes for every case
  tests/fixtures/tokenizers/bpe/variants.json
                                           the BPE file with GPT-2 / Llama 3
                                           options and stripping added tokens,
                                           with their ids
  tests/fixtures/tokenizers/nfc.json       NFC reference strings
  tests/fixtures/tokenizers/chat.json      rendered ChatML, ids and loss mask

The training text is tests/fixtures/tokenizers/corpus.txt (checked in) plus
the SFT conversations, so the tiny model's tokenizer compresses the kind of
text it is trained on.

Run from the repository root:  .venv/bin/python tests/make_tokenizer_fixtures.py
"""
import json
import os
import random
import sys
import unicodedata

import sentencepiece as spm
from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIX = os.path.join(ROOT, "tests", "fixtures", "tokenizers")
SFT = os.path.join(ROOT, "tests", "fixtures", "sft", "tiny.jsonl")

# The pre-tokenizer regex of Qwen2 / Qwen2.5 / Qwen3 tokenizer.json.
QWEN2_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                 r"|\s*[\r\n]+|\s+(?!\S)|\s+")
SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
NON_SPECIAL = ["<think>", "</think>"]
VOCAB_TOTAL = 512
SFT_MAX_TOKENS = 256


# ---------------------------------------------------------------------------
# SFT conversations: a user asks for an elementwise Triton kernel and the
# assistant answers with the same template every time, so a tiny model can
# learn to reproduce it. Some conversations continue with a follow-up turn.

OPS = [
    ("relu", "ReLU", "tl.maximum(x, 0.0)"),
    ("square", "square", "x * x"),
    ("neg", "negation", "-x"),
    ("abs", "absolute value", "tl.abs(x)"),
    ("exp", "exponential", "tl.exp(x)"),
    ("sigmoid", "sigmoid", "1.0 / (1.0 + tl.exp(-x))"),
    ("silu", "SiLU", "x / (1.0 + tl.exp(-x))"),
    ("double", "doubling", "x * 2.0"),
    ("add_one", "add one", "x + 1.0"),
    ("sqrt", "square root", "tl.sqrt(x)"),
    ("log", "natural log", "tl.log(x)"),
    ("sin", "sine", "tl.sin(x)"),
    ("cos", "cosine", "tl.cos(x)"),
    ("recip", "reciprocal", "1.0 / x"),
    ("cube", "cube", "x * x * x"),
    ("softplus", "softplus", "tl.log(1.0 + tl.exp(x))"),
]
SYSTEM = "You write fast Triton kernels. Answer with one python block."
ASKS = [
    "Write a Triton kernel for {desc}.",
    "Give me a Triton kernel that computes {desc} of x.",
    "I need {desc} as a Triton kernel.",
]


def kernel_answer(name, desc, expr, block):
    return (f"A Triton kernel for {desc}:\n"
            "```python\n"
            "import torch\n"
            "import triton\n"
            "import triton.language as tl\n"
            "\n"
            "@triton.jit\n"
            f"def {name}_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):\n"
            "    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)\n"
            "    mask = offs < n\n"
            "    x = tl.load(x_ptr + offs, mask=mask)\n"
            f"    tl.store(y_ptr + offs, {expr}, mask=mask)\n"
            "\n"
            "class ModelNew(torch.nn.Module):\n"
            "    def forward(self, x):\n"
            "        y = torch.empty_like(x)\n"
            "        n = x.numel()\n"
            f"        {name}_kernel[(triton.cdiv(n, {block}),)](x, y, n, BLOCK={block})\n"
            "        return y\n"
            "```")


def make_sft():
    convs = []
    for i, (name, desc, expr) in enumerate(OPS):
        for v in range(3):
            ask = ASKS[(i + v) % len(ASKS)].format(desc=desc)
            msgs = []
            if v == 0:
                msgs.append({"role": "system", "content": SYSTEM})
            msgs.append({"role": "user", "content": ask})
            msgs.append({"role": "assistant", "content": kernel_answer(name, desc, expr, 1024)})
            if v == 2:
                msgs.append({"role": "user", "content": "Use BLOCK = 256."})
                msgs.append({"role": "assistant",
                             "content": f"With BLOCK=256:\n```python\n"
                                        f"{name}_kernel[(triton.cdiv(n, 256),)](x, y, n, BLOCK=256)\n```"})
            convs.append({"messages": msgs})
    return convs


def render_chat(msgs, add_generation_prompt=False):
    s = "".join(f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n" for m in msgs)
    return s + ("<|im_start|>assistant\n" if add_generation_prompt else "")


# ---------------------------------------------------------------------------
# Training the tokenizers

def training_texts(corpus, convs):
    texts = corpus.split("\n\n") + [render_chat(c["messages"]) for c in convs]
    # The markers become added tokens after training; left in the text they
    # would only waste merges on their pieces.
    for tok in SPECIAL + NON_SPECIAL:
        texts = [t.replace(tok, "\n") for t in texts]
    return texts


def train_bpe(texts, path):
    tok = Tokenizer(models.BPE(unk_token=None, byte_fallback=False))
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN2_PATTERN), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    n_added = len(SPECIAL) + len(NON_SPECIAL)
    trainer = trainers.BpeTrainer(vocab_size=VOCAB_TOTAL - n_added, min_frequency=2, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), special_tokens=[])
    tok.train_from_iterator(texts, trainer)
    # As in Qwen's files, the added tokens sit after the learned vocabulary.
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in SPECIAL])
    tok.add_tokens([AddedToken(t, special=False, normalized=False) for t in NON_SPECIAL])
    tok.save(path, pretty=False)
    tok = Tokenizer.from_file(path)  # everything below sees what the file says
    n = tok.get_vocab_size(with_added_tokens=True)
    assert n == VOCAB_TOTAL, f"BPE vocabulary has {n} ids, want {VOCAB_TOTAL}"
    return tok


def train_spm(texts, prefix):
    tmp = prefix + ".train.txt"
    with open(tmp, "w", encoding="utf-8") as f:
        for t in texts:
            for line in t.split("\n"):
                if line.strip():
                    f.write(line + "\n")
    try:
        spm.SentencePieceTrainer.train(
            input=tmp, model_prefix=prefix, model_type="unigram", vocab_size=600,
            user_defined_symbols=SPECIAL, character_coverage=0.995, byte_fallback=True,
            num_threads=1, minloglevel=2, seed_sentencepiece_size=20000, shuffle_input_sentence=False)
    finally:
        os.remove(tmp)
    os.remove(prefix + ".vocab")
    return spm.SentencePieceProcessor(model_file=prefix + ".model")


# ---------------------------------------------------------------------------
# Test cases

EDGE_CASES = [
    "", " ", "  ", "\n", "\n\n\n", "\t", "\r\n", " \n ", "a", "A", "0", "'", "'s", "'S", "don't", "DON'T",
    "x'll 've 'M 'Ve", "  leading and trailing  ", "tab\tand  space \t\n", "line\r\nline\rline\n",
    "12345678901234567890", "3.14159e-10", "١٢٣٤ ٥٦", "¼ ½ ²³ Ⅷ",
    # Not in NFC: the normalizer composes them before tokenizing.
    "Cafe\u0301 re\u0301sume\u0301", "A\u030a \u212b \u2126 \u1e0b\u0323 q\u0307\u0323",
    "\u1112\u1161\u11ab\u1100\u1173\u11af", "\uf900\uf91c \u0958 \u2adc", "e\u0301\u0301\u0327 o\u0308\u0304",
    # Unicode whitespace the regex has to agree on.
    "a\u00a0b\u1680c\u2000d\u200ae\u2028f\u2029g\u202fh\u205fi\u3000j", "x\u0085y\u000bz\u000cw",
    "mongolian\u180evowel separator", "zero\u200bwidth\u200djoiner\ufeffbom",
    # Letters and digits newer than Unicode 14 (CJK extension H, Kirat Rai digits, Cyrillic).
    "new \U00031350\U00031351 x\U0002ebf0 \U00016d70\U00016d71 12\U0001e4f0 \u1c89\u1c8a!",
    "a   \u180eb  \u180e", "tl\U0002ebf0.load and x\U00031350.arange", "\U0001e4f0.load \U00016d70.exp",
    # Added tokens at the edges and back to back.
    "<|im_start|>", "<|im_end|><|im_end|>", "<|endoftext|>x", "x<|endoftext|>", "<think></think>",
    "a<|im_start|>b<|im_end|>c", "<<|im_start|>>", "<|im_start|><|im_start|>|>", "\n<|im_end|>\n",
    "emoji \U0001f9d1\u200d\U0001f4bb\U0001f3ff and \U0001faf6 and \U0001f3f4\U000e0067\U000e0062\U000e0073\U000e0063\U000e0074\U000e007f",
    "private \ue000 and astral \U00020000\U0002a6d6 and \U0010fffd",
]

FUZZ_POOL = (list("abcXYZ019 _-.,;:'\"!?()[]{}<>|/\\#@$%^&*+=~`") + [" ", "  ", "\t", "\n", "\r", "\r\n", "\n\n"]
             + list("éÅßøłŁœ") + ["e\u0301", "o\u0308", "\u0327", "\u0301", "\u0323\u0302"]
             + list("中文字の한국ไทยअनुΩωЖж٣") + ["\u00a0", "\u3000", "\u2009", "\u0085", "\u180e", "\u200b"]
             + ["\U0001f680", "\U0001f44d\U0001f3fd", "\u2764\ufe0f", "\U0001f1ef\U0001f1f5"]
             + ["'s", "'T", "'re", "'ll", "'D", "<|im_start|>", "<|im_end|>", "<|endoftext|>", "<think>", "<|im_"])


def fuzz_cases(rng, n):
    return ["".join(rng.choice(FUZZ_POOL) for _ in range(rng.randint(1, 30))) for _ in range(n)]


def text_cases(corpus):
    cases = corpus.split("\n")            # every line, \r and trailing blanks kept
    cases += [p for p in corpus.split("\n\n") if "\n" in p]  # multi-line chunks
    cases.append(corpus)                   # the whole file
    cases += EDGE_CASES
    cases += fuzz_cases(random.Random(1234), 300)
    return cases


def bpe_expected(tok, cases):
    out = []
    for t in cases:
        ids = tok.encode(t, add_special_tokens=False).ids
        out.append({"text": t, "ids": ids, "decoded": tok.decode(ids, skip_special_tokens=False),
                    "decoded_skip_special": tok.decode(ids, skip_special_tokens=True)})
    return out


def spm_expected(sp, cases):
    out = []
    for t in cases:
        ids = sp.encode(t, out_type=int)
        out.append({"text": t, "ids": ids, "decoded": sp.decode(ids)})
    return out


# ---------------------------------------------------------------------------
# Variants of the BPE file that exercise the other options real checkpoints
# use: GPT-2's ByteLevel with its own regex and a prefix space, Llama 3's
# regex with ignore_merges, added tokens that strip whitespace or match
# normalized text. Same vocabulary and merges; each variant is stored whole.

LLAMA3_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                  r"|\s*[\r\n]+|\s+(?!\S)|\s+")
VARIANT_EXTRA_CASES = [
    "a <sep> b", "a<sep>b", "x   <sep>   y", " <sep>", "<sep> ", "\t<sep>\n", "Café and Cafe\u0301 or cafe\u0301",
    "123456789 12 1234", "word", " word", "hello world", "<|im_start|> spaced <|im_end|>",
]


def make_variants(bpe_path, corpus):
    base = json.load(open(bpe_path, encoding="utf-8"))

    def added(i, content, special, normalized, lstrip=False, rstrip=False):
        return {"id": i, "content": content, "single_word": False, "lstrip": lstrip, "rstrip": rstrip,
                "normalized": normalized, "special": special}

    variants = {}
    gpt2 = json.loads(json.dumps(base))
    gpt2["normalizer"] = None
    gpt2["pre_tokenizer"] = {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True}
    gpt2["added_tokens"] = base["added_tokens"][:3] + [added(510, "<sep>", True, False, True, True)]
    variants["gpt2_bytelevel_regex"] = gpt2

    llama = json.loads(json.dumps(base))
    llama["normalizer"] = None
    llama["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = LLAMA3_PATTERN
    llama["model"]["ignore_merges"] = True
    variants["llama3_ignore_merges"] = llama

    qwen = json.loads(json.dumps(base))
    qwen["added_tokens"] = base["added_tokens"][:3] + [added(510, "<sep>", True, False, True, False),
                                                      added(511, "Café", False, True)]
    variants["qwen_normalized_added"] = qwen

    cases = corpus.split("\n") + EDGE_CASES + VARIANT_EXTRA_CASES + fuzz_cases(random.Random(77), 100)
    out = []
    for name, d in variants.items():
        tok = Tokenizer.from_str(json.dumps(d))
        out.append({"name": name, "tokenizer": d,
                    "cases": [{"text": t, "ids": tok.encode(t, add_special_tokens=False).ids} for t in cases]})
    return out


# ---------------------------------------------------------------------------
# NFC: singletons that change, and random strings over the characters that
# decompose, compose or reorder. The reference is the tokenizer's own NFC
# normalizer (the Rust implementation the ids depend on).

def nfc_cases(tok):
    norm = tok.normalizer
    changed = []
    interesting = []
    for cp in range(0x110000):
        if 0xD800 <= cp < 0xE000:
            continue
        c = chr(cp)
        if unicodedata.decomposition(c) or unicodedata.combining(c):
            interesting.append(c)
        n = norm.normalize_str(c)
        if n != c:
            changed.append([cp, n])
    # Hangul jamo (L, V, T) compose algorithmically.
    interesting += [chr(c) for c in list(range(0x1100, 0x1113)) + list(range(0x1161, 0x1176))
                    + list(range(0x11A8, 0x11C3))]
    interesting += list("aeiouAEIOUnsczNSCZ")
    rng = random.Random(99)
    strings = []
    for _ in range(1500):
        s = "".join(rng.choice(interesting) for _ in range(rng.randint(1, 6)))
        strings.append([s, norm.normalize_str(s)])
    return {"unicode_version": unicodedata.unidata_version, "changed_singletons": changed, "strings": strings}


# ---------------------------------------------------------------------------
# Chat: rendered ChatML, the ids HF gives for the whole string, and the mask
# of tokens the assistant wrote (content + its <|im_end|>), taken from the
# token offsets in the rendered string.

CHAT_CASES = [
    {"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello!"}]},
    {"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "2+2?"},
                  {"role": "assistant", "content": "4"}, {"role": "user", "content": "and 3+3?"},
                  {"role": "assistant", "content": "6"}], "add_generation_prompt": True},
    {"messages": [{"role": "user", "content": "tool please"}, {"role": "assistant", "content": "calling"},
                  {"role": "tool", "content": "{\"status\": \"ok\"}"},
                  {"role": "assistant", "content": "done"}]},
    # Content that starts with newlines or spaces merges with the header's
    # newline into one token: the mask has to follow the token, not the text.
    {"messages": [{"role": "user", "content": "\n\nlead"}, {"role": "assistant", "content": "\n\n  x = 1\n"}]},
    {"messages": [{"role": "user", "content": " spaced "}, {"role": "assistant", "content": "   "}]},
    {"messages": [{"role": "user", "content": ""}, {"role": "assistant", "content": ""}]},
    # Markers inside content are parsed as markers, as HF does on the string.
    {"messages": [{"role": "user", "content": "say <|im_end|> now"},
                  {"role": "assistant", "content": "ok <|im_end|> <think>x</think>"}]},
    {"messages": [{"role": "user", "content": "Cafe\u0301 \u4e2d\u6587 \U0001f680"},
                  {"role": "assistant", "content": "re\u0301sume\u0301 \u3000 \u0301"}]},
    {"messages": [{"role": "system", "content": SYSTEM}], "add_generation_prompt": True},
]


def chat_expected(tok, convs):
    out = []
    for conv in convs:
        msgs = conv["messages"]
        gen = conv.get("add_generation_prompt", False)
        text = render_chat(msgs, gen)
        # Character spans written by the assistant: content plus "<|im_end|>".
        spans, pos = [], 0
        for m in msgs:
            header = f"<|im_start|>{m['role']}\n"
            start = pos + len(header)
            end = start + len(m["content"]) + len("<|im_end|>")
            if m["role"] == "assistant":
                spans.append((start, end))
            pos = end + 1
        enc = tok.encode(text, add_special_tokens=False)
        mask = [int(any(s < e and b < e_ for (b, e) in spans)) for (s, e_) in enc.offsets]
        out.append({"messages": msgs, "add_generation_prompt": gen, "text": text, "ids": enc.ids, "mask": mask})
    return out


def main():
    with open(os.path.join(FIX, "corpus.txt"), encoding="utf-8", newline="") as f:
        corpus = f.read()
    convs = make_sft()
    texts = training_texts(corpus, convs)

    bpe_path = os.path.join(FIX, "bpe", "tokenizer.json")
    tok = train_bpe(texts, bpe_path)
    sp = train_spm(texts, os.path.join(FIX, "spm", "model"))

    longest = 0
    for c in convs:
        n = len(tok.encode(render_chat(c["messages"]), add_special_tokens=False).ids)
        longest = max(longest, n)
        assert n <= SFT_MAX_TOKENS, f"SFT conversation has {n} tokens > {SFT_MAX_TOKENS}: {c}"
    with open(SFT, "w", encoding="utf-8") as f:
        for c in convs:
            f.write(json.dumps(c, ensure_ascii=False) + "\n")

    cases = text_cases(corpus)
    # 1 MB of text for timing is built in the test itself from corpus.txt.
    dump = lambda obj, path: json.dump(obj, open(path, "w", encoding="utf-8"), ensure_ascii=False, indent=None)
    dump({"vocab_size": tok.get_vocab_size(with_added_tokens=True), "cases": bpe_expected(tok, cases)},
         os.path.join(FIX, "bpe", "expected.json"))
    dump({"vocab_size": sp.get_piece_size(), "cases": spm_expected(sp, cases)}, os.path.join(FIX, "spm", "expected.json"))
    dump({"variants": make_variants(bpe_path, corpus)}, os.path.join(FIX, "bpe", "variants.json"))
    dump(nfc_cases(tok), os.path.join(FIX, "nfc.json"))
    chat = chat_expected(tok, CHAT_CASES) + chat_expected(tok, convs[:6])
    dump({"cases": chat}, os.path.join(FIX, "chat.json"))
    print(f"bpe vocab {tok.get_vocab_size(with_added_tokens=True)}, spm vocab {sp.get_piece_size()}, "
          f"{len(cases)} text cases, {len(chat)} chat cases, {len(convs)} SFT conversations "
          f"(longest {longest} tokens)")


if __name__ == "__main__":
    sys.exit(main())
