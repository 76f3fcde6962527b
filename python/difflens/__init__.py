"""Read what DiffLens writes into numpy arrays: trace bundles, needle and batch reports, the logit lens and
its attribution, and `difflens serve`'s replies. numpy only; no LibTorch.

    import difflens
    b = difflens.read_bundle("diff-trace/")
    b.layers[2]["A"][0]          # head 0's A1 - lambda A2, [T, T]
"""

from ._safetensors import FormatError
from ._safetensors import read as read_safetensors
from .bundle import Bundle, Layer, from_bytes, read_bundle
from .client import Client, ServerError
from .reports import Report, Table, read_batch, read_csv, read_lens, read_needle, read_shares

__version__ = "0.1.0"
__all__ = [
    "Bundle", "Client", "FormatError", "Layer", "Report", "ServerError", "Table", "from_bytes", "read_batch",
    "read_bundle", "read_csv", "read_lens", "read_needle", "read_safetensors", "read_shares",
]
