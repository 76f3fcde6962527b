#!/usr/bin/env python3
"""Writes tests/data/bpe/edges.txt: the texts where byte-level BPE tokenizers part ways, each in a few
contexts - every White_Space character and the look-alikes that are not (U+180E, U+200B, U+2060, U+FEFF,
the information separators), the letters and numbers newer than PCRE2's tables (core/formats/unicode_gap.inc) and
some newer still than the references', special tokens of the three real vocabularies whole, split and
glued, digit runs, contractions, long runs, emoji sequences, combining marks, and prose with blank lines.
Deterministic."""
import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parents[2]

SPACES = [0x09, 0x0B, 0x0C, 0x20, 0x85, 0xA0, 0x1680] + list(range(0x2000, 0x200B)) + [
    0x2028, 0x2029, 0x202F, 0x205F, 0x3000]
NOT_SPACES = [0x180E, 0x200B, 0x200C, 0x200D, 0x2060, 0xFEFF, 0x1C, 0x1D, 0x1E, 0x1F]
# Letters and digits of Unicode 17.0 (per Node's ICU 78), newer than both references' tables.
NEWER_THAN_REFERENCES = [0x088F, 0x0C5C, 0x0CDC, 0xA7CE, 0x10940, 0x11DB0, 0x16EA0, 0x11DE0, 0x11DE9]


def gap_code_points():
    text = (ROOT / "core" / "formats" / "unicode_gap.inc").read_text()
    out = []
    for name in ("kGapLetters", "kGapNumbers"):
        spelled = re.search(name + r' =\s*R"\((.*?)\)"', text, re.S).group(1)
        for a, b in re.findall(r"\\x\{([0-9A-F]+)\}(?:-\\x\{([0-9A-F]+)\})?", spelled):
            lo, hi = int(a, 16), int(b or a, 16)
            out += sorted({lo, (lo + hi) // 2, hi})
    return out


def main():
    lines = []
    for cp in SPACES + NOT_SPACES + [0x0D]:
        c = chr(cp)
        lines += [f"a{c}b", f"x{c}'m", f"{c}'s", f"1{c}2", f"word{c}{c}next", f"!{c}?", f"end{c}",
                  f"{c}{c}{c}", f"  {c} x", f"{c}\t{c}y", f"{c}<|endoftext|>{c}"]
    for cp in gap_code_points() + NEWER_THAN_REFERENCES:
        c = chr(cp)
        lines += [f" {c}{c}", f"a{c}", f"{c}'s", f"1{c}", f"{c}123", f"!{c}", f"{c}{c}{c}{c}", f"\u00e9{c}x"]
    specials = ["<|endoftext|>", "<|fim_prefix|>", "<|fim_middle|>", "<|fim_suffix|>", "<|endofprompt|>",
                "<|begin_of_text|>", "<|end_of_text|>", "<|eot_id|>", "<|start_header_id|>",
                "<|end_header_id|>", "<|python_tag|>", "<|reserved_special_token_0|>",
                "<|reserved_special_token_247|>", "<|reserved_special_token_248|>", "<|im_start|>"]
    for s in specials:
        lines += [s, f"a{s}b", f" {s} ", f"{s}{s}", s[:-1], s + ">", "<" + s, s[:5] + " " + s[5:],
                  f"Text about the token {s}, quoted: '{s}'."]
    lines += ["<|start_header_id|>user<|end_header_id|>\r\rHello<|eot_id|><|start_header_id|>assistant",
              "<|endoftext|<|endoftext|>|>", "<||>", "<|", "|>"]
    lines += ["1", "12", "123", "1234", "12345678901234567890", "3.14159", "1,000,000", "-0.5e-10",
              "\u0663\u0664\u0665\u0666", "\uff11\uff12\uff13\uff14", "\u2460\u2461\u2462", "\u00b2\u00b3",
              "\u2167 \u216b", "v1.2.3-rc4", "0x1F2E3D", "2026-11-27T20:08:21Z"]
    lines += ["'S 'LL 'Re 'VE 'D 'M 'T", "I'M YOU'LL we'RE", "\u2019s don\u2019t", "it''s", "''", "'",
              "'s's's", " 's", "x'", "'\u180e's"]
    lines += [" " * 200 + "x", "a" * 500, "!" * 300, "\t \t \t  \t" * 20 + "y", "a\r\r\rb", "\r \r",
              " \u0301 \u0301\u0301", "\ufeffBOM at the start", "\u200f\u05e9\u05dc\u05d5\u05dd\u200e ok"]
    lines += ["\U0001F468\u200D\U0001F469\u200D\U0001F467\u200D\U0001F466 family",
              "\U0001F1E9\U0001F1EA\U0001F1EF\U0001F1F5 flags", "\U0001F44D\U0001F3FD\u2764\uFE0F",
              "\u0928\u092e\u0938\u094d\u0924\u0947 \u0915\u094d\u0937", "\u0e2a\u0e27\u0e31\u0e2a\u0e14\u0e35",
              "\u0639\u0640\u0640\u0631\u0628\u064a", "\u1100\u1161\u11a8 \uac00\u11a8",
              "\u5dee\u5206\u6ce8\u610f\u529b\u3002 \u30c8\u30e9\u30f3\u30b9\u30d5\u30a9\u30fc\u30de\u30fc"]
    prose = ("Attention noise, seen.\n\nA Differential Transformer subtracts two softmax maps:  A1 - lambda A2.\n"
             "  Indented line with trailing spaces   \n\n\n\tTabbed line\r\nWindows line\r\n \n \n"
             "The end.  ")
    text = "\n".join(lines) + "\n" + prose + "\n"
    out = ROOT / "tests" / "data" / "bpe" / "edges.txt"
    out.write_text(text, encoding="utf-8", newline="")
    print(f"wrote {out}: {len(lines)} lines + prose, {len(text)} characters")


if __name__ == "__main__":
    main()
