"""A small client for `difflens serve` (core/FORMATS.md, section 3), standard library and numpy only."""

import json
import os
import urllib.error
import urllib.request

from . import _safetensors
from .bundle import from_bytes


class ServerError(RuntimeError):
    """The server refused the request: `status` (400, 401, 404, 409, 413, 415, 503) and its message."""

    def __init__(self, status, message):
        super().__init__(f"{status}: {message}")
        self.status = status
        self.message = message


class Client:
    """`Client("http://127.0.0.1:8765", token)`; the token defaults to $DIFFLENS_TOKEN. `name` is sent as
    X-DiffLens-Client: a newer capture or needle request of the same name cancels the older one."""

    def __init__(self, url="http://127.0.0.1:8765", token=None, name=None, timeout=600):
        self.url = url.rstrip("/")
        self.token = token if token is not None else os.environ.get("DIFFLENS_TOKEN", "")
        if not self.token:
            raise ValueError("no token: give the one `difflens serve` printed, or set DIFFLENS_TOKEN")
        self.name = name
        self.timeout = timeout

    def _request(self, path, body=None):
        headers = {"Authorization": "Bearer " + self.token}
        if self.name:
            headers["X-DiffLens-Client"] = self.name
        data = None
        if body is not None:
            data = json.dumps(body).encode("utf-8")
            headers["Content-Type"] = "application/json"
        req = urllib.request.Request(self.url + path, data=data, headers=headers)
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as r:
                return r.read()
        except urllib.error.HTTPError as e:
            text = e.read().decode("utf-8", "replace")
            try:
                message = json.loads(text)["error"]
            except (ValueError, KeyError, TypeError):
                message = text or e.reason
            raise ServerError(e.code, message) from None

    def _json(self, path, body=None):
        return json.loads(self._request(path, body).decode("utf-8"))

    def info(self):
        """The server's models (index, path, description, config, ...) and limits."""
        return self._json("/v1/info")

    def capture(self, prompt=None, token_ids=None, model=0, **fields):
        """Runs model `model` on a prompt (text) or token ids and returns the trace as a Bundle. Other capture
        fields (keep_qkv=True, layers=[0], position_top_k=5, interventions=["lambda=0"], ...) pass as given."""
        if (prompt is None) == (token_ids is None):
            raise ValueError("give exactly one of prompt, token_ids")
        if fields.get("stream"):
            raise ValueError("stream=True is the app's progress protocol; this client waits for the whole reply")
        body = {"model": model, **fields}
        if prompt is not None:
            body["prompt"] = prompt
        else:
            body["token_ids"] = [int(t) for t in token_ids]
        return from_bytes(self._request("/v1/capture", body), f"{self.url}/v1/capture")

    def tile(self, model, layer, head, row0, rows, col0, cols):
        """An exact tile of the last trace this client captured with `model`: {"A", "A1", "A2"} arrays."""
        body = {"model": model, "layer": layer, "head": head, "row0": row0, "rows": rows, "col0": col0,
                "cols": cols}
        tensors, _ = _safetensors.parse(self._request("/v1/tile", body), f"{self.url}/v1/tile")
        return tensors

    def tokenize(self, text, model=0, bos=True):
        """{"ids", "pieces", "offsets"} of a text as model `model` reads it."""
        return self._json("/v1/tokenize", {"model": model, "text": text, "bos": bos})

    def needle(self, model=0, **fields):
        """One needle-lab episode (length, depth, needles, queried, seed, haystack, ...) as a dict."""
        if fields.get("stream"):
            raise ValueError("stream=True is the app's progress protocol; this client waits for the whole reply")
        return self._json("/v1/needle", {"model": model, **fields})

    def item(self, item, model=0, intervene=None, line=1):
        """One prompt-set item (a dict as a line of `batch`'s items file) run on model `model`: its record,
        each head's attention measures and, with a corrupt prompt, each head's patching."""
        body = {"model": model, "item": item, "line": line}
        if intervene:
            body["intervene"] = list(intervene)
        return self._json("/v1/item", body)

    def batch(self, items, model=0, intervene=None):
        """Every item of a list on model `model`, one request each (items queue on the server)."""
        return [self.item(it, model, intervene, line=n) for n, it in enumerate(items, start=1)]
