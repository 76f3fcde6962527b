#!/usr/bin/python3
"""DiffLens capture against a PyTorch-eager forward of the same checkpoints, in one run.

First checks that the eager reference computes the same maps (a DiffLens trace bundle of each model at 64
tokens, largest |difference|), then runs the eager reference and `difflens bench` on the same token ids,
threads and repeats, and prints per length and model: the medians, their ratio (eager / DiffLens: above 1,
DiffLens is faster) and each process's peak resident memory after that length.

    tests/bench/capture_vs_eager.py [--lengths 256,1024,2048] [--repeats 5] [--threads 2]
        [--models assets/models/diff-small,assets/models/baseline-small] [--difflens build/app/difflens]

Needs python3-torch (Debian: apt install python3-torch; run with /usr/bin/python3) and a built difflens.
"""
import argparse
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


def run(cmd):
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if r.returncode != 0:
        sys.exit("failed (%d): %s\n%s" % (r.returncode, " ".join(cmd), r.stdout))
    return r.stdout


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", default="assets/models/diff-small,assets/models/baseline-small")
    ap.add_argument("--lengths", default="256,1024,2048")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--difflens", default=os.path.join(ROOT, "build/app/difflens"))
    args = ap.parse_args()
    if not os.access(args.difflens, os.X_OK):
        sys.exit("no difflens at %s (scripts/build, or --difflens PATH)" % args.difflens)
    try:
        import torch  # noqa: F401
    except ImportError:
        sys.exit("the eager reference needs python3-torch: sudo apt install python3-torch (run with /usr/bin/python3)")
    models = [m if os.path.isabs(m) else os.path.join(ROOT, m) for m in args.models.split(",")]
    eager = [sys.executable, os.path.join(HERE, "eager_reference.py"), "--models", ",".join(models),
             "--threads", str(args.threads)]

    with tempfile.TemporaryDirectory() as tmp:
        ids = ",".join(str(3 + (i * 7919) % (4096 - 3)) for i in range(64))
        bundles = []
        for i, m in enumerate(models):
            out = os.path.join(tmp, "t%d" % i)
            run([args.difflens, "capture", "--model", m, "--token-ids", ids, "--out", out, "--threads", "1"])
            bundles.append(out)
        print(run(eager + ["--check", ",".join(bundles)]).strip())

    print("running the eager reference ...", flush=True)
    rows = {}
    idle = {}
    for line in run(eager + ["--lengths", args.lengths, "--repeats", str(args.repeats)]).splitlines():
        f = line.split()
        if f and f[0] == "eager-resident":
            idle["eager"] = float(f[1])
        if f and f[0] == "eager":
            rows[(f[1], int(f[2]))] = {"eager": float(f[3]), "eager_rss": float(f[5])}
    print("running difflens bench ...", flush=True)
    bench = run([args.difflens, "bench", "--models", ",".join(models), "--lengths", args.lengths, "--repeats",
                 str(args.repeats), "--threads", str(args.threads)])
    header = None
    for line in bench.splitlines():
        f = line.split()
        if line.startswith("bench:"):
            header = line
        if line.startswith("resident before the captures"):
            idle["difflens"] = float(line.split(":")[1].split()[0])
        if len(f) >= 8 and f[0] in ("diff", "baseline") and f[1].isdigit():
            rows.setdefault((f[0], int(f[1])), {}).update({"difflens": float(f[2]), "difflens_rss": float(f[-2])})
    print(header)
    print("peak memory: resident at the length's end (both models' runs so far), and in brackets above what the"
          " process held before its first run (eager %.0f MB, difflens %.0f MB: libraries and weights)"
          % (idle.get("eager", 0), idle.get("difflens", 0)))
    print("%-9s %6s %12s %12s %8s %20s %20s" % ("model", "T", "eager ms", "difflens ms", "ratio", "eager peak MB",
                                              "difflens peak MB"))
    for (model, T), r in sorted(rows.items(), key=lambda kv: (kv[0][1], kv[0][0] != "diff")):
        if "eager" not in r or "difflens" not in r:
            continue
        print("%-9s %6d %12.1f %12.1f %7.2fx %11.0f (+%5.0f) %11.0f (+%5.0f)" % (
            model, T, r["eager"], r["difflens"], r["eager"] / r["difflens"], r["eager_rss"],
            r["eager_rss"] - idle.get("eager", 0), r["difflens_rss"], r["difflens_rss"] - idle.get("difflens", 0)))


if __name__ == "__main__":
    main()
