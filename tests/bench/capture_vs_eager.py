#!/usr/bin/python3
"""DiffLens capture against a PyTorch-eager forward of the same checkpoints, in one run.

First checks that the eager reference computes the same maps (a DiffLens trace bundle of each model at 64
tokens, largest |difference|), then runs the eager reference and `difflens bench` on the same token ids,
threads and repeats, and prints per length and model: the medians, their ratio (eager / DiffLens: above 1,
DiffLens is faster) and each process's peak resident memory after that length.

Eager runs twice: as a user runs it (glibc's default allocator, which hands large freed blocks back to the
system, so each run's maps arrive in fresh pages the kernel must fault in and zero), and with the allocator
settings DiffLens itself makes at start (core tune_allocator: one arena, no mmap'd blocks, no trimming, so
memory is reused from run to run). The first is what a user waits for; the second compares the computation
alone. The gap between them is the machine's cost of fresh pages, which differs widely between machines
(a page fault costs ~0.1-0.5 us on bare metal, 10 us or more in some virtual machines).

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


def run(cmd, env=None):
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
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

    rows = {}
    idle = {}
    # DiffLens's own allocator settings (core/model/model.cpp tune_allocator), for the second eager run.
    kept = dict(os.environ, GLIBC_TUNABLES="glibc.malloc.arena_max=1:glibc.malloc.mmap_max=0:"
                "glibc.malloc.trim_threshold=2146435072:glibc.malloc.top_pad=67108864")
    for key, env, what in (("eager", None, "as a user runs it"), ("kept", kept, "memory kept as DiffLens does")):
        print("running the eager reference (%s) ..." % what, flush=True)
        for line in run(eager + ["--lengths", args.lengths, "--repeats", str(args.repeats)], env).splitlines():
            f = line.split()
            if f and f[0] == "eager-resident" and key == "eager":
                idle["eager"] = float(f[1])
            if f and f[0] == "eager":
                r = rows.setdefault((f[1], int(f[2])), {})
                r[key] = float(f[3])
                if key == "eager":
                    r["eager_rss"] = float(f[5])
    print("running the eager reference's products alone (memory kept) ...", flush=True)
    for line in run(eager + ["--lengths", args.lengths, "--repeats", str(args.repeats), "--products-only"],
                    kept).splitlines():
        f = line.split()
        if f and f[0] == "products":
            rows.setdefault((f[1], int(f[2])), {})["products"] = float(f[3])
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
    print("eager ms: as a user runs it; kept ms: the same with DiffLens's allocator settings (the computation"
          " alone); each ratio is that eager time / DiffLens's; products ms: eager's forward without attention"
          " (projections, norms, MLP on the same BLAS), memory kept")
    print("%-9s %6s %10s %10s %12s %8s %8s %12s %20s %20s" % (
        "model", "T", "eager ms", "kept ms", "difflens ms", "ratio", "kept", "products ms", "eager peak MB",
        "difflens peak MB"))
    for (model, T), r in sorted(rows.items(), key=lambda kv: (kv[0][1], kv[0][0] != "diff")):
        if "eager" not in r or "kept" not in r or "difflens" not in r:
            continue
        print("%-9s %6d %10.1f %10.1f %12.1f %7.2fx %7.2fx %12.1f %11.0f (+%5.0f) %11.0f (+%5.0f)" % (
            model, T, r["eager"], r["kept"], r["difflens"], r["eager"] / r["difflens"], r["kept"] / r["difflens"],
            r.get("products", float("nan")), r["eager_rss"], r["eager_rss"] - idle.get("eager", 0), r["difflens_rss"],
            r["difflens_rss"] - idle.get("difflens", 0)))


if __name__ == "__main__":
    main()
