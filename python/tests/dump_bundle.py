"""Reads a bundle with the difflens package and writes what it read, for tests/test_python.cpp to compare
with the C++ trace: OUT/summary.json (tokens, ids, kind, heads, lambda, interventions, next tokens, shapes)
and one raw little-endian float32 file per array (OUT/layers.I.NAME.f32, OUT/predictions.NAME.f32).

    python3 python/tests/dump_bundle.py BUNDLE OUT
"""

import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import difflens  # noqa: E402


def dump(b, out):
    """Writes what Bundle `b` holds into folder `out`."""
    os.makedirs(out, exist_ok=True)
    shapes = {}

    def put(name, a):
        shapes[name] = list(a.shape)
        np.ascontiguousarray(a, dtype="<f4").tofile(os.path.join(out, name + ".f32"))

    for layer in b.layers:
        for name, a in layer.arrays.items():
            put(f"layers.{layer.index}.{name}", a)
    if b.predictions:
        for name in ("ids", "probs", "actual"):
            put("predictions." + name, b.predictions[name])
    summary = {
        "kind": b.kind,
        "length": len(b),
        "tokens": b.tokens,
        "token_ids": [int(t) for t in b.token_ids],
        "layers": [
            {"index": l.index, "heads": l.heads, "lambda": l.lam, "pooled": l.pooled,
             "logit_top1": (l.logit_stats or {}).get("top", [None])[0]}
            for l in b.layers
        ],
        "interventions": b.interventions,
        "next_token": b.next_token,
        "predictions": None if not b.predictions else {"k": b.predictions["k"], "from": b.predictions["from"]},
        "shapes": shapes,
        "repr": repr(b),
    }
    with open(os.path.join(out, "summary.json"), "w", encoding="utf-8") as f:
        json.dump(summary, f)


if __name__ == "__main__":
    try:
        dump(difflens.read_bundle(sys.argv[1]), sys.argv[2])
    except difflens.FormatError as e:
        print(f"FormatError: {e}", file=sys.stderr)
        sys.exit(2)
