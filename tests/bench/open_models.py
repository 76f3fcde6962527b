#!/usr/bin/python3
"""Memory and time to capture a prompt with the public checkpoints' shapes, on random weights.

The public DIFF checkpoints are too large to ship or download in CI; their shapes are not. This writes
random checkpoints in each one's own layout and size, then times `difflens bench` on each pair (every
map kept, logit statistics on, one untimed warm-up run):

  diff-mlx     guygrigsby/diff-mlx's diff/ and vanilla/ (Stage 1: dim 768, 12 layers, 12 plain heads of 64,
               vocab 100277, MLP 2048), F32 as MLX saved them, under MLX's names, without the optimizer state
               its latest.safetensors also carries (which only costs disk: it is never read);
  llama-1b     kajuma/DiffLlama-0.3B-handcut's shape (Llama 3.2 1B: hidden 2048, 16 layers, 32 heads, 8
               key/value heads, head_dim 64, MLP 8192, vocab 128256, tied embeddings, llama3 rope scaling)
               as DiffLlamaForCausalLM beside a LlamaForCausalLM of the same shape, BF16 as the hub holds it.

    tests/bench/open_models.py [--lengths 1024] [--repeats 3] [--threads 2] [--pairs diff-mlx,llama-1b]
        [--difflens build/app/difflens] [--keep DIR]

Needs numpy (Debian: python3-numpy) and a built difflens; about 7 GB of free disk for llama-1b.
"""
import argparse
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


def write_safetensors(path, tensors, dtype):
    """tensors: list of (name, shape, seed); each filled with N(0, 0.02) (norm weights: 1)."""
    header, offset = {}, 0
    width = 4 if dtype == "F32" else 2
    for name, shape, _ in tensors:
        n = int(np.prod(shape)) * width
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [offset, offset + n]}
        offset += n
    head = json.dumps(header).encode()
    head += b" " * ((8 - len(head) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(head)))
        f.write(head)
        for name, shape, seed in tensors:
            rng = np.random.default_rng(seed)
            if len(shape) == 1 and ("norm" in name or "scale" in name):
                a = np.ones(shape, dtype=np.float32)
            else:
                a = (rng.standard_normal(shape, dtype=np.float32) * 0.02).astype(np.float32)
            if dtype == "BF16":
                a = (a.view(np.uint32) >> 16).astype(np.uint16)
            f.write(a.tobytes())


def diff_mlx_pair(root):
    m = {"dim": 768, "n_layers": 12, "n_heads_vanilla": 12, "qk_head_dim": 64, "vocab_size": 100277,
         "mlp_intermediate": 2048, "block_size": 2048, "rope_base": 10000.0, "rms_eps": 1e-5,
         "tie_embeddings": True, "amp_dtype": "bfloat16"}
    for variant in ("diff", "vanilla"):
        d = os.path.join(root, variant)
        os.makedirs(d, exist_ok=True)
        json.dump({"model": m, "train": {}}, open(os.path.join(d, "config.json"), "w"))
        t, seed = [("model.tok_embed.weight", (100277, 768), 1)], 2
        for l in range(12):
            p = "model.blocks.%d." % l
            for n, s in [("norm_attn.scale", (768,)), ("attn.q_proj.weight", (768, 768)),
                         ("attn.k_proj.weight", (768, 768)), ("attn.v_proj.weight", (768, 768)),
                         ("attn.o_proj.weight", (768, 768)), ("norm_mlp.scale", (768,)),
                         ("mlp.gate.weight", (2048, 768)), ("mlp.up.weight", (2048, 768)),
                         ("mlp.down.weight", (768, 2048))]:
                t.append((p + n, s, seed))
                seed += 1
            if variant == "diff":
                for n in ("lambda_q1", "lambda_k1", "lambda_q2", "lambda_k2"):
                    t.append((p + "attn." + n, (64,), seed))
                    seed += 1
                t.append((p + "attn.subln.scale", (128,), seed))
        t.append(("model.final_norm.scale", (768,), seed + 1))
        write_safetensors(os.path.join(d, "latest.safetensors"), t, "F32")
    return os.path.join(root, "diff") + "," + os.path.join(root, "vanilla")


def llama_1b_pair(root):
    base = {"hidden_size": 2048, "num_hidden_layers": 16, "num_attention_heads": 32, "num_key_value_heads": 8,
            "head_dim": 64, "intermediate_size": 8192, "vocab_size": 128256, "max_position_embeddings": 131072,
            "rms_norm_eps": 1e-5, "rope_theta": 500000.0, "tie_word_embeddings": True, "hidden_act": "silu",
            "bos_token_id": 128000, "eos_token_id": 128001, "torch_dtype": "bfloat16",
            "rope_scaling": {"rope_type": "llama3", "factor": 32.0, "low_freq_factor": 1.0,
                             "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}}
    dirs = []
    for arch, mtype in (("DiffLlamaForCausalLM", "diffllama"), ("LlamaForCausalLM", "llama")):
        d = os.path.join(root, mtype)
        os.makedirs(d, exist_ok=True)
        c = dict(base, architectures=[arch], model_type=mtype)
        if mtype == "diffllama":
            c["lambda_std_dev"] = 0.1
        json.dump(c, open(os.path.join(d, "config.json"), "w"))
        t, seed = [("model.embed_tokens.weight", (128256, 2048), 1)], 2
        for l in range(16):
            p = "model.layers.%d." % l
            for n, s in [("input_layernorm.weight", (2048,)), ("self_attn.q_proj.weight", (2048, 2048)),
                         ("self_attn.k_proj.weight", (512, 2048)), ("self_attn.v_proj.weight", (512, 2048)),
                         ("self_attn.o_proj.weight", (2048, 2048)), ("post_attention_layernorm.weight", (2048,)),
                         ("mlp.gate_proj.weight", (8192, 2048)), ("mlp.up_proj.weight", (8192, 2048)),
                         ("mlp.down_proj.weight", (2048, 8192))]:
                t.append((p + n, s, seed))
                seed += 1
            if mtype == "diffllama":
                for n in ("lambda_q1", "lambda_k1", "lambda_q2", "lambda_k2"):
                    t.append((p + "self_attn." + n, (64,), seed))
                    seed += 1
        t.append(("model.norm.weight", (2048,), seed + 1))
        write_safetensors(os.path.join(d, "model.safetensors"), t, "BF16")
        dirs.append(d)
    return ",".join(dirs)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--lengths", default="1024")
    ap.add_argument("--repeats", default="3")
    ap.add_argument("--threads", default="2")
    ap.add_argument("--pairs", default="diff-mlx,llama-1b")
    ap.add_argument("--difflens", default=os.path.join(ROOT, "build/app/difflens"))
    ap.add_argument("--keep", default="", help="write the checkpoints here and keep them")
    a = ap.parse_args()
    root = a.keep or tempfile.mkdtemp(prefix="difflens-open-models-")
    makers = {"diff-mlx": diff_mlx_pair, "llama-1b": llama_1b_pair}
    try:
        for name in a.pairs.split(","):
            if name not in makers:
                sys.exit("unknown pair %s (diff-mlx, llama-1b)" % name)
            models = makers[name](os.path.join(root, name))
            cmd = [a.difflens, "bench", "--models", models, "--lengths", a.lengths, "--repeats", a.repeats,
                   "--threads", a.threads]
            print("== %s: %s" % (name, " ".join(cmd)), flush=True)
            r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            print(r.stdout, flush=True)
            if r.returncode != 0:
                sys.exit("bench failed (%d)" % r.returncode)
            if not a.keep:
                shutil.rmtree(os.path.join(root, name))
    finally:
        if not a.keep:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
