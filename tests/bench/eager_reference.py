#!/usr/bin/python3
"""What a researcher would write instead of DiffLens: a PyTorch-eager forward of a DiffLens checkpoint
(DIFF or baseline, the layout the bundled pair uses) that returns every attention map as tensors.

Per layer: RMSNorm, q/k/v projections, RoPE, one batched softmax(q k^T + causal mask) over all heads
(DIFF: both components, then A1 - lambda A2), times V, the DIFF per-head RMSNorm x (1 - lambda_init),
o_proj, SwiGLU. Timed like `difflens bench`: the same token ids, one untimed warm-up run, the median of
--repeats runs; after each length the process's peak resident memory (VmHWM).

Prints one line per length: "eager MODEL T median_ms min_ms peak_rss_mb top1_id top1_prob"; with
--products-only the forward without attention instead: "products MODEL T median_ms".
Debian: apt install python3-torch (run with /usr/bin/python3).
"""
import argparse
import json
import math
import os
import statistics
import struct
import time

import torch


def load_safetensors(path):
    with open(path, "rb") as f:
        data = f.read()
    n = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8 : 8 + n])
    dtypes = {"F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16}
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        a, b = info["data_offsets"]
        raw = bytearray(data[8 + n + a : 8 + n + b])
        out[name] = torch.frombuffer(raw, dtype=dtypes[info["dtype"]]).reshape(info["shape"]).float()
    return out


def rms_norm(x, w, eps):
    x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
    return x * w if w is not None else x


class Model:
    def __init__(self, directory):
        with open(os.path.join(directory, "config.json")) as f:
            self.c = json.load(f)
        c = self.c
        if c.get("rope_style", "interleaved") != "interleaved" or c.get("diff_pairing", "adjacent") != "adjacent":
            raise SystemExit("eager_reference: only the bundled layout (interleaved RoPE, adjacent DIFF components)")
        self.w = load_safetensors(os.path.join(directory, "model.safetensors"))
        self.diff = c["attention"] == "diff"
        self.d = c["head_dim"]
        self.layers = c["num_hidden_layers"]
        self.heads = c["num_attention_heads"] // (2 if self.diff else 1)
        self.kv = c["num_key_value_heads"] // (2 if self.diff else 1)
        self.name = c.get("name", directory)

    def rope(self, T):
        d = self.d
        inv = torch.tensor([self.c["rope_theta"] ** (-2.0 * i / d) for i in range(d // 2)], dtype=torch.float64)
        angle = torch.outer(torch.arange(T, dtype=torch.float64), inv)
        return angle.cos().float(), angle.sin().float()

    @staticmethod
    def rotate(x, cos, sin):  # interleaved pairs, x [B, h, T, d]
        x0, x1 = x[..., 0::2], x[..., 1::2]
        return torch.stack((x0 * cos - x1 * sin, x0 * sin + x1 * cos), -1).flatten(-2)

    def projections(self, h, i):
        """Layer i's pre-norm and q, k, v projections of h [1, T, E]."""
        p = "model.layers.%d.self_attn." % i
        x = rms_norm(h, self.w["model.layers.%d.input_layernorm.weight" % i], self.c["rms_norm_eps"])
        return x @ self.w[p + "q_proj.weight"].T, x @ self.w[p + "k_proj.weight"].T, x @ self.w[p + "v_proj.weight"].T

    def rest(self, h, o, i):
        """Layer i after its heads' outputs o [1, T, width]: o_proj, residual, post-norm, SwiGLU, residual."""
        w, p = self.w, "model.layers.%d." % i
        h = h + o @ w[p + "self_attn.o_proj.weight"].T
        y = rms_norm(h, w[p + "post_attention_layernorm.weight"], self.c["rms_norm_eps"])
        gate = torch.nn.functional.silu(y @ w[p + "mlp.gate_proj.weight"].T)
        return h + (gate * (y @ w[p + "mlp.up_proj.weight"].T)) @ w[p + "mlp.down_proj.weight"].T

    def products(self, ids):
        """The forward's matrix products, norms and MLP without attention (the heads' outputs replaced by the
        values): the part of the work any implementation on the same BLAS shares, and its floor."""
        h = self.w["model.embed_tokens.weight"][ids].unsqueeze(0)
        for i in range(self.layers):
            q, k, v = self.projections(h, i)
            h = self.rest(h, v.repeat(1, 1, q.size(-1) // v.size(-1)) + q + k.sum(-1, keepdim=True), i)
        return h

    def forward(self, ids):
        """ids [T] -> (next-token probabilities [V], maps: per layer a tuple of [H, T, T] tensors)."""
        c, w, d, H, Hkv = self.c, self.w, self.d, self.heads, self.kv
        T = ids.numel()
        cos, sin = self.rope(T)
        mask = torch.full((T, T), float("-inf")).triu(1)
        h = w["model.embed_tokens.weight"][ids].unsqueeze(0)  # [1, T, E]
        maps = []
        for i in range(self.layers):
            p = "model.layers.%d." % i
            q, k, v = self.projections(h, i)
            if self.diff:
                q = q.view(1, T, H, 2, d).permute(0, 3, 2, 1, 4).reshape(1, 2 * H, T, d)  # [q1 heads, q2 heads]
                k = k.view(1, T, Hkv, 2, d).permute(0, 3, 2, 1, 4).reshape(1, 2 * Hkv, T, d)
                v = v.view(1, T, Hkv, 2 * d).transpose(1, 2)
            else:
                q = q.view(1, T, H, d).transpose(1, 2)
                k = k.view(1, T, Hkv, d).transpose(1, 2)
                v = v.view(1, T, Hkv, d).transpose(1, 2)
            q = self.rotate(q, cos, sin) / math.sqrt(d)
            k = self.rotate(k, cos, sin)
            groups = H // Hkv
            if groups > 1:
                k = k.repeat_interleave(groups, 1)
                v = v.repeat_interleave(groups, 1)
            a = torch.softmax(q @ k.transpose(-2, -1) + mask, -1)  # every component map at once
            if self.diff:
                lam_init = 0.8 - 0.6 * math.exp(-0.3 * i)
                lam = (
                    torch.exp((w[p + "self_attn.lambda_q1"] * w[p + "self_attn.lambda_k1"]).sum())
                    - torch.exp((w[p + "self_attn.lambda_q2"] * w[p + "self_attn.lambda_k2"]).sum())
                    + lam_init
                )
                a1, a2 = a[:, :H], a[:, H:]
                diff = a1 - lam * a2
                o = diff @ v  # [1, H, T, 2d]
                sub = w.get(p + "self_attn.subln.weight")
                o = rms_norm(o, sub, c.get("subln_eps", 1e-5)) * (1 - lam_init)
                maps.append((a1[0], a2[0], diff[0]))
                o = o.transpose(1, 2).reshape(1, T, H * 2 * d)
            else:
                o = (a @ v).transpose(1, 2).reshape(1, T, H * d)
                maps.append((a[0],))
            h = self.rest(h, o, i)
        last = rms_norm(h[0, -1], w["model.norm.weight"], c["rms_norm_eps"])
        head = w["lm_head.weight"] if "lm_head.weight" in w else w["model.embed_tokens.weight"]
        return torch.softmax(last @ head.T, -1), maps


def status_mb(field):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field):
                return int(line.split()[1]) / 1024.0
    return 0.0


def peak_rss_mb():
    return status_mb("VmHWM:")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", required=True, help="DIR1,DIR2")
    ap.add_argument("--lengths", default="256,1024,2048")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--products-only", action="store_true", help="time the forward without attention "
                    "(projections, norms, MLP: Model.products) and print 'products MODEL T median_ms'")
    ap.add_argument("--check", metavar="BUNDLE,BUNDLE", help="trace bundles of the same models (difflens capture "
                    "--out): print the largest |difference| between their maps and this forward's, then exit")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    models = [Model(m) for m in args.models.split(",")]
    if args.check:
        for m, bundle in zip(models, args.check.split(",")):
            with open(os.path.join(bundle, "trace.json")) as f:
                ids = torch.tensor(json.load(f)["token_ids"])
            kept = load_safetensors(os.path.join(bundle, "maps.safetensors"))
            with torch.inference_mode():
                _, maps = m.forward(ids)
            names = ("A1", "A2", "A") if m.diff else ("A",)
            worst = max(float((kept["layers.%d.%s" % (i, n)] - maps[i][j]).abs().max())
                        for i in range(m.layers) for j, n in enumerate(names))
            print("check %s %d tokens: largest |difference| of every map %.3g" % (m.name, ids.numel(), worst))
        return
    lengths = [int(t) for t in args.lengths.split(",")]
    print("eager-resident %.1f" % status_mb("VmRSS:"), flush=True)
    with torch.inference_mode():
        for T in sorted(lengths):
            for m in models:
                vocab = m.c["vocab_size"]
                ids = torch.tensor([3 + (i * 7919) % (vocab - 3) for i in range(T)])
                if args.products_only:
                    m.products(ids)
                    times = []
                    for _ in range(args.repeats):
                        t0 = time.perf_counter()
                        m.products(ids)
                        times.append((time.perf_counter() - t0) * 1000)
                    print("products %s %d %.1f" % ("diff" if m.diff else "baseline", T, statistics.median(times)),
                          flush=True)
                    continue
                m.forward(ids)  # warm-up, untimed
                times = []
                for _ in range(args.repeats):
                    t0 = time.perf_counter()
                    probs, maps = m.forward(ids)
                    times.append((time.perf_counter() - t0) * 1000)
                    del maps
                top = int(probs.argmax())
                print(
                    "eager %s %d %.1f %.1f %.1f %d %.6f"
                    % ("diff" if m.diff else "baseline", T, statistics.median(times), min(times), peak_rss_mb(),
                       top, float(probs[top])),
                    flush=True,
                )


if __name__ == "__main__":
    main()
