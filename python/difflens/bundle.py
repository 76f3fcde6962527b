"""Trace bundles (`difflens capture --out DIR`, the app's File > Save bundle, `serve`'s capture replies) as
numpy arrays with their names: core/FORMATS.md, section 2, is the format."""

import json
import os

import numpy as np

from . import _safetensors
from ._safetensors import FormatError

# Per layer: every array a bundle may hold, by its name after "layers.{i}.".
LAYER_ARRAYS = (
    "A", "A1", "A2",  # exact maps [kept heads, T, T]; DIFF: A = A1 - lambda A2
    "logits1", "logits2", "hidden",  # --keep-logits [heads, T, T], --keep-hidden [T, E]
    "A.mean", "A.max", "A1.mean", "A1.max", "A2.mean", "A2.max",  # long prompts: pooled [k, P, P]
    "q1", "k1", "q2", "k2", "lse1", "lse2",  # long prompts or --keep-qkv
    "v", "subln_weight",  # --keep-qkv
    "lambda", "lambda_logits",  # DIFF V2: lambda(h, t) and its logit [heads, T]; DIFF V1 under a per-head lambda
)


def _short(a):
    return "x".join(str(d) for d in a.shape)


class Layer:
    """One layer of a trace: its kept heads, lambda (DIFF), statistics and arrays.

    `layer["A1"]` is the array of that name (KeyError when the bundle does not hold it); `layer.arrays` all of
    them. Map row r is head `heads[r]`; `layer.map("A", head)` picks a head by its number.
    """

    def __init__(self, info, arrays):
        self.index = int(info["index"])
        self.heads = [int(h) for h in info.get("heads", [])]
        lam = info.get("lambda")
        self.lambda_info = dict(lam) if isinstance(lam, dict) else None  # lambda, exp1, exp2, lambda_init
        self.logit_stats = info.get("logit_stats")
        self.hidden_stats = info.get("hidden_stats")
        self.pooled = int(info.get("pooled", 0))  # P of the pooled maps; 0: exact maps
        self.arrays = arrays

    @property
    def lam(self):
        """DIFF: the layer's lambda (DIFF V2: its mean over heads and tokens); None for a baseline."""
        return None if self.lambda_info is None else float(self.lambda_info["lambda"])

    def __getitem__(self, name):
        return self.arrays[name]

    def __contains__(self, name):
        return name in self.arrays

    def map(self, name, head):
        """The map `name` ("A", "A1", "A2", or a pooled "A.mean" ...) of head number `head`."""
        if head not in self.heads:
            raise KeyError(f"layer {self.index}: head {head} was not kept (kept: {self.heads})")
        return self.arrays[name][self.heads.index(head)]

    def __repr__(self):
        parts = [f"layer {self.index}", f"heads {self.heads}"]
        if self.lam is not None:
            parts.append(f"lambda {self.lam:.4f}")
        if self.pooled:
            parts.append(f"pooled {self.pooled}x{self.pooled}")
        parts.append(", ".join(f"{k} {_short(v)}" for k, v in self.arrays.items()) or "no arrays")
        return "<" + "; ".join(parts) + ">"


class Bundle:
    """A trace bundle: tokens, config, per-layer arrays, next-token candidates, interventions, predictions.

    Attributes: `tokens` (pieces), `token_ids` (int64 array), `config` (config.json's dict), `kind` ("diff",
    "diff-v2" or "baseline": the config's "attention"), `layers` (list of Layer), `next_token` (list of dicts:
    id, text, probability), `interventions` (list of {"spec", "as_run"}), `predictions` (dict of arrays "ids",
    "probs", "actual" with "k" and "from", or None), `trace` (trace.json as read), `metadata` (the
    safetensors metadata), `source`.
    """

    def __init__(self, trace, tensors, metadata, source):
        if not isinstance(trace, dict) or trace.get("format") != "difflens-trace":
            raise FormatError(f"{source}: not a DiffLens trace (trace.json's format is not difflens-trace)")
        if trace.get("version") != 1:
            raise FormatError(f"{source}: trace version {trace.get('version')!r}; this reader knows 1")
        self.source = source
        self.trace = trace
        self.metadata = metadata
        self.config = trace.get("config", {})
        self.kind = self.config.get("attention", "baseline")
        self.tokens = list(trace.get("tokens", []))
        self.token_ids = np.asarray(trace.get("token_ids", []), dtype=np.int64)
        if len(self.tokens) != len(self.token_ids):
            raise FormatError(f"{source}: {len(self.tokens)} tokens but {len(self.token_ids)} token ids")
        self.interventions = list(trace.get("interventions", []))
        self.next_token = list(trace.get("next_token", []))
        self.pooled_budget = int(trace.get("pooled_budget", 0))
        self.logit_bits = int(trace.get("logit_bits", 0))
        T = len(self.token_ids)
        known = {"predictions.ids", "predictions.probs", "predictions.actual"}
        self.layers = []
        if not isinstance(self.config, dict) or not isinstance(trace.get("layers", []), list):
            raise FormatError(f"{source}: trace.json's config is not an object or its layers not a list")
        for info in trace.get("layers", []):
            if not isinstance(info, dict) or not isinstance(info.get("index"), int):
                raise FormatError(f"{source}: a layer of trace.json has no whole-number index")
            i = int(info["index"])
            arrays = {}
            for name in LAYER_ARRAYS:
                key = f"layers.{i}.{name}"
                if key in tensors:
                    arrays[name] = tensors[key]
                    known.add(key)
            layer = Layer(info, arrays)
            self._check_layer(layer, T)
            self.layers.append(layer)
        unknown = sorted(set(tensors) - known)
        if unknown:
            raise FormatError(f"{source}: tensors trace.json does not account for: {', '.join(unknown[:5])}")
        self.predictions = None
        p = trace.get("predictions")
        if p:
            k = int(p["k"])
            self.predictions = {"k": k, "from": int(p.get("from", 0))}
            for name, cols in (("ids", k), ("probs", k), ("actual", 2)):
                a = tensors.get("predictions." + name)
                if a is None or a.shape != (T, cols):
                    raise FormatError(
                        f"{source}: predictions.{name} is {None if a is None else a.shape}, "
                        f"trace.json implies {(T, cols)}"
                    )
                self.predictions[name] = a

    def _check_layer(self, layer, T):
        k = len(layer.heads)
        for name, a in layer.arrays.items():
            if name in ("A", "A1", "A2"):
                want = (k, T, T)
            elif name.endswith(".mean") or name.endswith(".max"):
                want = (k, layer.pooled, layer.pooled)
            else:
                continue
            if a.shape != want:
                raise FormatError(
                    f"{self.source}: tensor 'layers.{layer.index}.{name}' is {a.shape}, trace.json implies {want}"
                )
        if self.kind in ("diff", "diff-v2") and layer.lambda_info is None:
            raise FormatError(f"{self.source}: layer {layer.index} of a DIFF model has no lambda")

    def __len__(self):
        return len(self.token_ids)

    def layer(self, index):
        """The layer numbered `index` (a bundle may keep some layers only)."""
        for l in self.layers:
            if l.index == index:
                return l
        raise KeyError(f"layer {index} is not in this bundle (kept: {[l.index for l in self.layers]})")

    def __repr__(self):
        name = self.config.get("name") or os.path.basename(str(self.trace.get("model_path", "")).rstrip("/"))
        lines = [f"<DiffLens bundle: {name} ({self.kind}), {len(self)} tokens, {len(self.layers)} layers"]
        if self.layers:
            lines.append("  " + repr(self.layers[0]) + (" ..." if len(self.layers) > 1 else ""))
            lams = [l.lam for l in self.layers if l.lam is not None]
            if lams:
                lines.append("  lambda per layer: " + ", ".join(f"{x:.3f}" for x in lams))
        if self.interventions:
            lines.append("  interventions: " + "; ".join(i.get("spec", "") for i in self.interventions))
        if self.next_token:
            t = self.next_token[0]
            lines.append(f"  next token: {t.get('text')!r} {t.get('probability', 0):.3f}")
        return "\n".join(lines) + ">"


def _one_file(tensors, metadata, source):
    """A bundle in one safetensors file: trace.json is in its metadata."""
    if "trace.json" not in metadata:
        raise FormatError(f"{source}: no trace.json in its metadata (not a DiffLens trace)")
    try:
        trace = json.loads(metadata["trace.json"])
    except json.JSONDecodeError as e:
        raise FormatError(f"{source} (trace.json): not valid JSON ({e})") from None
    return Bundle(trace, tensors, metadata, source)


def from_bytes(data, source="<reply>"):
    """A bundle held in one safetensors file in memory (a `serve` capture reply)."""
    tensors, metadata = _safetensors.parse(data, source)
    return _one_file(tensors, metadata, source)


def read_bundle(path):
    """Reads a trace bundle: a folder with trace.json and maps.safetensors, or one .safetensors file that
    holds trace.json in its metadata (a saved `serve` reply)."""
    path = os.fspath(path)
    if os.path.isdir(path):
        jpath = os.path.join(path, "trace.json")
        try:
            with open(jpath, "rb") as f:
                text = f.read((64 << 20) + 1)
        except OSError as e:
            raise FormatError(f"{jpath}: cannot open it ({e.strerror}; is this a trace bundle folder?)") from None
        if len(text) > 64 << 20:
            raise FormatError(f"{jpath}: over 64 MB, no trace.json is that large")
        try:
            trace = json.loads(text.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as e:
            raise FormatError(f"{jpath}: not valid JSON ({e})") from None
        tensors, metadata = _safetensors.read(os.path.join(path, "maps.safetensors"))
        return Bundle(trace, tensors, metadata, path)
    tensors, metadata = _safetensors.read(path)
    return _one_file(tensors, metadata, path)
