#!/usr/bin/python3
"""`difflens train` against a PyTorch-eager training loop on the same shapes and the same rows, in one run.

For each row length T (tokens per step kept at --tokens-per-step, so batch = tokens / T) and each model of
the pair (DIFF, baseline; one at a time, so that each has the threads to itself):
  1. `difflens train` runs --steps steps of the fair recipe's first phase (assets/models/train-fair.json:
     its mix, answer weight, optimizer) at T x batch, with --rows-out: every row it trains on, with its
     loss weights, is written to a file; its tokens per second are read from its last progress line.
  2. An eager loop trains the same architecture from the weights difflens ended with, on exactly those
     rows, as a researcher would write it: the forward of eager_reference.py (checked against DiffLens's
     maps by capture_vs_eager.py) batched, every attention map materialised, the weighted next-token
     cross-entropy, loss.backward(), clip_grad_norm_(1.0), torch.optim.AdamW (0.9, 0.95; weight decay
     0.1 on matrices) at a fixed rate of 2e-3 (the rate does not change a step's work; difflens runs with a
     one-step warm-up here). Its tokens per second cover the same steps.
Both count every step, the first included; difflens also builds its rows while it trains (a worker thread
on the same cores), eager gets them ready-made. Prints one line per length and model and the ratio
(difflens / eager: above 1, difflens is faster).

    tests/bench/train_vs_eager.py [--lengths 128,512] [--steps 40] [--threads 2] [--tokens-per-step 2048]
        [--corpus build/corpus] [--difflens build/app/difflens] [--keep DIR]

Needs python3-torch (Debian: apt install python3-torch; run with /usr/bin/python3), a built difflens and
the prepared corpus (scripts/prepare-corpus).
"""
import argparse
import json
import math
import os
import re
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)


def run(cmd):
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if r.returncode != 0:
        sys.exit("failed (%d): %s\n%s" % (r.returncode, " ".join(cmd), r.stdout))
    return r.stdout


def difflens_train(args, config, out, model, rows_out):
    cmd = [args.difflens, "train", "--config", config, "--corpus", args.corpus, "--out", out, "--only", model,
           "--threads", str(args.threads), "--fresh"]
    if rows_out:
        cmd += ["--rows-out", rows_out]
    log = run(cmd)
    rates = re.findall(r"step (\d+)/(\d+) .* ([0-9.]+) tok/s", log)
    if not rates or rates[-1][0] != rates[-1][1]:
        sys.exit("no final progress line in difflens train's output:\n" + log)
    return float(rates[-1][2])


def read_rows(path, torch):
    steps = {}
    with open(path) as f:
        for line in f:
            r = json.loads(line)
            steps.setdefault(r["step"], []).append(r)
    batches = []
    for step in sorted(steps):
        rows = sorted(steps[step], key=lambda r: r["row"])
        ids = torch.tensor([r["ids"] for r in rows])
        weights = torch.tensor([r["weights"] for r in rows]) if "weights" in rows[0] else None
        batches.append((ids, weights))
    return batches


class EagerTrainer:
    """eager_reference.Model's forward for a batch [B, T], with its weights as trainable leaves."""

    def __init__(self, directory, torch):
        from eager_reference import Model  # noqa: E402 (the checked forward)

        self.torch = torch
        self.m = Model(directory)
        for t in self.m.w.values():
            t.requires_grad_(True)
        decay = [t for t in self.m.w.values() if t.dim() >= 2]
        keep = [t for t in self.m.w.values() if t.dim() < 2]
        self.opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": keep, "weight_decay": 0.0}],
                                     lr=2e-3, betas=(0.9, 0.95), eps=1e-8)

    def logits(self, ids):
        torch, m = self.torch, self.m
        c, w, d, H, Hkv = m.c, m.w, m.d, m.heads, m.kv
        B, T = ids.shape
        cos, sin = m.rope(T)
        mask = torch.full((T, T), float("-inf")).triu(1)
        h = w["model.embed_tokens.weight"][ids]  # [B, T, E]
        for i in range(m.layers):
            p = "model.layers.%d." % i
            q, k, v = m.projections(h, i)
            if m.diff:
                q = q.view(B, T, H, 2, d).permute(0, 3, 2, 1, 4).reshape(B, 2 * H, T, d)
                k = k.view(B, T, Hkv, 2, d).permute(0, 3, 2, 1, 4).reshape(B, 2 * Hkv, T, d)
                v = v.view(B, T, Hkv, 2 * d).transpose(1, 2)
            else:
                q = q.view(B, T, H, d).transpose(1, 2)
                k = k.view(B, T, Hkv, d).transpose(1, 2)
                v = v.view(B, T, Hkv, d).transpose(1, 2)
            q = m.rotate(q, cos, sin) / math.sqrt(d)
            k = m.rotate(k, cos, sin)
            if H // Hkv > 1:
                k = k.repeat_interleave(H // Hkv, 1)
                v = v.repeat_interleave(H // Hkv, 1)
            a = torch.softmax(q @ k.transpose(-2, -1) + mask, -1)
            if m.diff:
                lam_init = 0.8 - 0.6 * math.exp(-0.3 * i)
                lam = (torch.exp((w[p + "self_attn.lambda_q1"] * w[p + "self_attn.lambda_k1"]).sum())
                       - torch.exp((w[p + "self_attn.lambda_q2"] * w[p + "self_attn.lambda_k2"]).sum()) + lam_init)
                o = (a[:, :H] - lam * a[:, H:]) @ v
                o = m_rms(o, w.get(p + "self_attn.subln.weight"), c.get("subln_eps", 1e-5)) * (1 - lam_init)
                o = o.transpose(1, 2).reshape(B, T, H * 2 * d)
            else:
                o = (a @ v).transpose(1, 2).reshape(B, T, H * d)
            h = m.rest(h, o, i)
        h = m_rms(h, w["model.norm.weight"], c["rms_norm_eps"])
        head = w["lm_head.weight"] if "lm_head.weight" in w else w["model.embed_tokens.weight"]
        return h @ head.T

    def step(self, ids, weights):
        torch = self.torch
        L = ids.size(1) - 1
        logp = torch.log_softmax(self.logits(ids[:, :L]).reshape(-1, self.m.c["vocab_size"]), -1)
        nll = torch.nn.functional.nll_loss(logp, ids[:, 1:].reshape(-1), reduction="none")
        if weights is None:
            loss = nll.mean()
        else:
            w = weights.reshape(-1)
            loss = (nll * w).sum() / w.sum()
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(list(self.m.w.values()), 1.0)
        self.opt.step()
        return float(nll.mean())


def m_rms(x, weight, eps):
    from eager_reference import rms_norm

    return rms_norm(x, weight, eps)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--lengths", default="128,512")
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--tokens-per-step", type=int, default=2048)
    ap.add_argument("--corpus", default=os.path.join(ROOT, "build/corpus"))
    ap.add_argument("--config", default=os.path.join(ROOT, "assets/models/train-fair.json"))
    ap.add_argument("--difflens", default=os.path.join(ROOT, "build/app/difflens"))
    ap.add_argument("--keep", metavar="DIR", help="keep the runs' folders and rows here (default: a temporary folder)")
    args = ap.parse_args()
    if not os.access(args.difflens, os.X_OK):
        sys.exit("no difflens at %s (scripts/build, or --difflens PATH)" % args.difflens)
    if not os.path.exists(os.path.join(args.corpus, "train.txt")):
        sys.exit("no prepared corpus at %s (scripts/prepare-corpus, or --corpus DIR)" % args.corpus)
    try:
        import torch
    except ImportError:
        sys.exit("the eager loop needs python3-torch: sudo apt install python3-torch (run with /usr/bin/python3)")
    torch.set_num_threads(args.threads)
    from eager_reference import Model

    with open(args.config) as f:
        recipe = json.load(f)
    work = args.keep or tempfile.mkdtemp(prefix="train-vs-eager-")
    os.makedirs(work, exist_ok=True)
    print("threads %d, %d steps of %d tokens per model; config: the first phase of %s" %
          (args.threads, args.steps, args.tokens_per_step, os.path.relpath(args.config, ROOT)), flush=True)
    for T in [int(t) for t in args.lengths.split(",")]:
        B = max(1, args.tokens_per_step // T)
        cfg = {k: v for k, v in recipe.items() if k not in ("phases", "corpus", "out")}
        cfg.update({"steps": args.steps, "seq_len": T, "batch": B, "eval_every": 10 ** 9, "save_every": 10 ** 9,
                    "eval_episodes": 1, "eval_lengths": [T], "threads": args.threads, "warmup": 1})
        config = os.path.join(work, "train-%d.json" % T)
        with open(config, "w") as f:
            json.dump(cfg, f)
        out = os.path.join(work, "run-%d" % T)
        rows_file = os.path.join(work, "rows-%d.jsonl" % T)
        if os.path.exists(rows_file):
            os.remove(rows_file)
        ours = {}
        for model in ("diff", "baseline"):
            ours[model] = difflens_train(args, config, out, model, rows_file if model == "diff" else None)
        batches = read_rows(rows_file, torch)
        if not batches:
            sys.exit("rows file %s is empty: difflens train wrote no rows" % rows_file)
        if len(batches) != args.steps or tuple(batches[0][0].shape) != (B, T + 1):
            sys.exit("rows file %s: %d steps of %s, expected %d of (%d, %d)" %
                     (rows_file, len(batches), tuple(batches[0][0].shape), args.steps, B, T + 1))
        for model, folder in (("diff", "diff-small"), ("baseline", "baseline-small")):
            trainer = EagerTrainer(os.path.join(out, folder), torch)
            # The batched forward against the checked single-row one, on the first row.
            with torch.no_grad():
                ids = batches[0][0][:1, :64]
                mine = torch.log_softmax(trainer.logits(ids)[0, -1], -1).exp()
                ref, _ = Model(os.path.join(out, folder)).forward(ids[0])
                gap = float((mine - ref).abs().max())
            if gap > 1e-5:
                sys.exit("eager's batched forward differs from eager_reference's by %.3g" % gap)
            losses = []
            t0 = time.perf_counter()
            for ids, weights in batches:
                losses.append(trainer.step(ids, weights))
            secs = time.perf_counter() - t0
            eager = args.steps * B * T / secs
            print("T %4d batch %2d %-8s difflens %7.0f tok/s  eager %7.0f tok/s  ratio %.2f  "
                  "(eager's loss %.2f -> %.2f; forward check %.1e)" %
                  (T, B, model, ours[model], eager, ours[model] / eager, losses[0], losses[-1], gap), flush=True)


if __name__ == "__main__":
    main()
