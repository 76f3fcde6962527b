#!/usr/bin/env python3
"""Writes tests/data/bpe/fuzz.txt: seeded random lines mixing scripts, digits, whitespace kinds,
contractions, emoji sequences and (partial) special tokens - the cases where regex pre-tokenizers and
added-token matching go wrong. Deterministic for a given seed."""
import pathlib
import random

ROOT = pathlib.Path(__file__).resolve().parents[2]
POOLS = [
    "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ",
    "0123456789",
    "!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~",
    " ", "  ", "\t", "\r", "\u00a0", "\u3000", "\u2009", "\u200b",
    "\u00e9\u00e8\u00ea\u00eb\u00e0\u00e4\u00f6\u00fc\u00df\u00e6\u0153\u00f1\u00e7\u0131\u0130",
    "\u0301\u0308\u0303\u0327",  # combining marks
    "\u0430\u0431\u0432\u0433\u0434\u0435\u0416\u042f\u044b",
    "\u03b1\u03b2\u03b3\u03bb\u03a3\u03a9",
    "\u0627\u0644\u0639\u0631\u0628\u064a\u0629\u0661\u0662",
    "\u0928\u092e\u0938\u094d\u0924\u0947\u0967",
    "\u5dee\u5206\u6ce8\u610f\u529b\u566a\u58f0\u3002\uff0c",
    "\u30c8\u30e9\u30f3\u3042\u3044\u3046\uff8a\uff9d",
    "\uc548\ub155\ud558\uc138\uc694",
    "\u00b2\u00b3\u00bd\u2167\uff11\uff12\u2460",
    "\u2018\u2019\u201c\u201d\u2014\u2013\u2026\u00b7\u2212\u2264\u221e",
    "\U0001f917\U0001f600\U0001f44d\U0001f3fd\u200d\U0001f468\U0001f469\ufe0f\u2764\U0001f1e9\U0001f1ea",
]
PHRASES = ["'s", "'S", "'t", "'re", "'ve", "'M", "'ll", "'d", "n't", "<|eot_id|>", "<|end_of_text|>",
           "<|begin_of_text|>", "<|eot", "_id|>", "<|", "|>", "DiffLens", "the", " the", "1234567", "3.14",
           "http://x.y/z", "    ", "\t\t", " \r", "\u00a0\u00a0"]


def main(seed=20261122, lines=200):
    rng = random.Random(seed)
    out = []
    for _ in range(lines):
        parts = []
        for _ in range(rng.randint(1, 24)):
            if rng.random() < 0.25:
                parts.append(rng.choice(PHRASES))
            else:
                pool = rng.choice(POOLS)
                parts.append("".join(rng.choice(pool) for _ in range(rng.randint(1, 6))))
        out.append("".join(parts))
    path = ROOT / "tests" / "data" / "bpe" / "fuzz.txt"
    path.write_text("".join(line + "\n" for line in out), encoding="utf-8", newline="")
    print(f"wrote {path.relative_to(ROOT)} ({len(out)} lines)")


if __name__ == "__main__":
    main()
