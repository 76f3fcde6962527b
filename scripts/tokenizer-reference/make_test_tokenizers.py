#!/usr/bin/env python3
"""Writes the small byte-level BPE tokenizers that tests/test_bpe_reference.cpp checks against the
Hugging Face `tokenizers` library (see README.md here). The merges are learned here, from the bundled
haystack text and this repository's README, so every file is our own; what is tested is how a
tokenizer.json is *applied*, which the reference library decides.

    python3 scripts/tokenizer-reference/make_test_tokenizers.py   # writes tests/data/bpe/*.tokenizer.json

Deterministic: the same inputs give byte-identical files.
"""
import collections
import json
import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parents[2]
OUT = ROOT / "tests" / "data" / "bpe"
MERGES = 1200
WORDS = 6000

# Llama 3's pre-tokenizer pattern (it is configuration, the same in every Llama 3 tokenizer.json).
LLAMA3_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                  r"|\s*[\r\n]+|\s+(?!\S)|\s+")


def byte_chars():
    """GPT-2's byte -> printable character table, as every byte-level BPE vocabulary uses it."""
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAC + 1)) + list(range(0xAE, 0xFF + 1))
    table, extra = {}, 0
    for b in range(256):
        if b in keep:
            table[b] = chr(b)
        else:
            table[b] = chr(256 + extra)
            extra += 1
    return table


def words_of(text):
    # Close enough to the real pre-tokenizers for learning merges (Python's re has no \p{L}).
    return re.findall(r"'s|'t|'re|'ve|'m|'ll|'d| ?[^\W\d_]+| ?\d{1,3}| ?[^\s\w]+|\s+(?!\S)|\s+", text)


def learn(texts):
    bc = byte_chars()
    counts = collections.Counter()
    for text, weight in texts:
        for w in words_of(text):
            counts[w] += weight
    common = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:WORDS]
    words = [([bc[b] for b in w.encode("utf-8")], n) for w, n in common]
    merges = []
    for _ in range(MERGES):
        pairs = collections.Counter()
        for syms, n in words:
            for a, b in zip(syms, syms[1:]):
                pairs[(a, b)] += n
        if not pairs:
            break
        best = min(pairs.items(), key=lambda kv: (-kv[1], kv[0]))[0]
        merges.append(best)
        joined = best[0] + best[1]
        for i, (syms, n) in enumerate(words):
            j, out = 0, []
            while j < len(syms):
                if j + 1 < len(syms) and (syms[j], syms[j + 1]) == best:
                    out.append(joined)
                    j += 2
                else:
                    out.append(syms[j])
                    j += 1
            words[i] = (out, n)
    vocab = {}
    for b in range(256):
        vocab[bc[b]] = len(vocab)
    for a, b in merges:
        if a + b not in vocab:
            vocab[a + b] = len(vocab)
    return vocab, merges


def tokenizer_json(vocab, merges, pre_tokenizer, added, ignore_merges, extra_vocab=()):
    vocab = dict(vocab)
    bc = byte_chars()
    for word in extra_vocab:  # whole words no merge sequence builds: only ignore_merges finds them
        vocab["".join(bc[b] for b in word.encode("utf-8"))] = len(vocab)
    added_tokens = []
    for content, special, flags in added:
        added_tokens.append(dict(id=len(vocab) + len(added_tokens), content=content, single_word=flags.get("single_word", False),
                                 lstrip=flags.get("lstrip", False), rstrip=flags.get("rstrip", False),
                                 normalized=False, special=special))
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": added_tokens,
        "normalizer": None,
        "pre_tokenizer": pre_tokenizer,
        "post_processor": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": False, "use_regex": True},
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
        "model": {
            "type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
            "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False, "ignore_merges": ignore_merges,
            "vocab": vocab, "merges": [[a, b] for a, b in merges],
        },
    }


def main():
    texts = [((ROOT / "assets" / "haystack.txt").read_text(encoding="utf-8"), 1),
             ((ROOT / "README.md").read_text(encoding="utf-8"), 3)]
    vocab, merges = learn(texts)
    specials = [("<|begin_of_text|>", True, {}), ("<|end_of_text|>", True, {}), ("<|eot_id|>", True, {}),
                ("<|start_header_id|>", True, {})]
    extra = [" DiffLens", " qwertyuiop", "DiffLens"]
    files = {
        # Llama 3's arrangement: Split(regex) then ByteLevel without its own regex; whole-word lookup first.
        "llama3-style": tokenizer_json(vocab, merges, {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": LLAMA3_PATTERN}, "behavior": "Isolated", "invert": False},
            {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}]},
            specials, True, extra),
        # GPT-2's arrangement: ByteLevel with its built-in regex, merges only.
        "gpt2-style": tokenizer_json(vocab, merges, {"type": "ByteLevel", "add_prefix_space": False,
                                                     "trim_offsets": True, "use_regex": True},
                                     [("<|endoftext|>", True, {})], False, extra),
        # ByteLevel with add_prefix_space, and added tokens that strip spaces or must stand alone.
        "prefix-space": tokenizer_json(vocab, merges, {"type": "ByteLevel", "add_prefix_space": True,
                                                       "trim_offsets": True, "use_regex": True},
                                       [("<|eot_id|>", True, {"lstrip": True}), ("<|end_of_text|>", True, {"rstrip": True}),
                                        ("DiffLens", False, {"single_word": True})], False),
    }
    OUT.mkdir(parents=True, exist_ok=True)
    for name, tok in files.items():
        path = OUT / f"{name}.tokenizer.json"
        path.write_text(json.dumps(tok, ensure_ascii=False, separators=(",", ":")) + "\n", encoding="utf-8")
        print(f"wrote {path.relative_to(ROOT)} ({len(tok['model']['vocab'])} tokens, {len(merges)} merges)")


if __name__ == "__main__":
    main()
