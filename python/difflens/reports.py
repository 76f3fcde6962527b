"""What DiffLens's commands write, read into numpy columns: `needle` (needle.json, needle.csv,
episodes.csv), `batch` (items.csv, heads.csv, patch.csv, steps.csv, summary.json), `lens` (the logit lens CSV)
and its `--attribution` shares. core/FORMATS.md names every column."""

import csv
import io
import json
import math
import os

import numpy as np

from ._safetensors import FormatError


class Table:
    """Columns by name: numbers as float64 arrays (an empty field is NaN), anything else as an object array of
    strings. `table["layer"]`, `table.columns`, `len(table)`, `table.where(model="diff-small")`."""

    def __init__(self, columns, source):
        self.columns = columns
        self.source = source

    def __getitem__(self, name):
        if name not in self.columns:
            raise KeyError(f"{self.source}: no column {name!r} (columns: {', '.join(self.columns)})")
        return self.columns[name]

    def __contains__(self, name):
        return name in self.columns

    def __len__(self):
        return len(next(iter(self.columns.values()))) if self.columns else 0

    def where(self, **equal):
        """The rows whose columns equal the values given (`where(model="diff-small", layer=2)`)."""
        keep = np.ones(len(self), dtype=bool)
        for name, value in equal.items():
            keep &= self[name] == value
        return Table({k: v[keep] for k, v in self.columns.items()}, self.source)

    def __repr__(self):
        return f"<Table {os.path.basename(str(self.source))}: {len(self)} rows; {', '.join(self.columns)}>"


def _number(v):
    """v as a float when it is written as a number ("nan" included); None for text that only looks like one
    (" 48", an answer with its space; "007", an id with its zeros)."""
    if v != v.strip() or (len(v) > 1 and v[0] == "0" and v[1].isdigit()):
        return None
    try:
        return float(v)
    except ValueError:
        return None


def _column(values):
    numbers = []
    for v in values:
        x = math.nan if v == "" else _number(v)
        if x is None:
            return np.array(values, dtype=object)
        numbers.append(x)
    return np.array(numbers, dtype=np.float64)


def read_csv(path, renamed=None):
    """A CSV file with a header row as a Table. `renamed` maps old column names to new ones."""
    path = os.fspath(path)
    try:
        with open(path, "r", encoding="utf-8", newline="") as f:
            text = f.read()
    except OSError as e:
        raise FormatError(f"{path}: cannot open it ({e.strerror})") from None
    except UnicodeDecodeError as e:
        raise FormatError(f"{path}: not UTF-8 ({e})") from None
    rows = list(csv.reader(io.StringIO(text)))
    if not rows:
        raise FormatError(f"{path}: empty (no header row)")
    header = [(renamed or {}).get(h, h) for h in rows[0]]
    width = len(header)
    cells = [[] for _ in header]
    for n, row in enumerate(rows[1:], start=2):
        if not row:
            continue
        if len(row) != width:
            raise FormatError(f"{path}: line {n} has {len(row)} fields, the header {width}")
        for c, v in zip(cells, row):
            c.append(v)
    return Table({h: _column(c) for h, c in zip(header, cells)}, path)


def _json(path):
    try:
        with open(path, "r", encoding="utf-8") as f:
            return json.load(f)
    except OSError as e:
        raise FormatError(f"{path}: cannot open it ({e.strerror})") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise FormatError(f"{path}: not valid JSON ({e})") from None


class Report:
    """A command's output folder: its JSON files as dicts and its CSV files as Tables, by name without the
    extension (`report.json["needle"]`, `report.needle`, `report.episodes`, `report.items`, ...)."""

    def __init__(self, folder, json_files, csv_files, renamed=None):
        self.folder = os.fspath(folder)
        if not os.path.isdir(self.folder):
            raise FormatError(f"{self.folder}: not a folder")
        self.json = {}
        self.tables = {}
        for name in json_files:
            p = os.path.join(self.folder, name + ".json")
            if os.path.exists(p):
                self.json[name] = _json(p)
        for name in csv_files:
            p = os.path.join(self.folder, name + ".csv")
            if os.path.exists(p):
                self.tables[name] = read_csv(p, renamed)
        if not self.json and not self.tables:
            want = ", ".join([n + ".json" for n in json_files] + [n + ".csv" for n in csv_files])
            raise FormatError(f"{self.folder}: holds none of {want}")

    def __getattr__(self, name):
        tables = self.__dict__.get("tables", {})
        if name in tables:
            return tables[name]
        raise AttributeError(f"{self.__dict__.get('folder')}: no {name}.csv here")

    def __repr__(self):
        parts = [f"{k}.json" for k in self.json] + [f"{k}.csv ({len(t)} rows)" for k, t in self.tables.items()]
        return f"<DiffLens report {self.folder}: {', '.join(parts)}>"


def read_needle(folder):
    """`difflens needle --out DIR`: needle.json, needle.csv (per model and cell) and episodes.csv."""
    return Report(folder, ["needle"], ["needle", "episodes"])


def read_batch(folder):
    """`difflens batch --out DIR`: summary.json; items.csv, heads.csv, patch.csv, steps.csv, errors.csv."""
    return Report(folder, ["summary"], ["items", "heads", "patch", "steps", "errors"])


def read_lens(path):
    """`difflens lens --out FILE.csv`: the logit lens, one row per model, layer and position."""
    return read_csv(path)


# shares.csv's column for a DIFF head's -lambda A2 part was called a2_part before; both read as the new name.
SHARES_RENAMED = {"a2_part": "minus_lambda_a2_part"}


def read_shares(path):
    """`difflens lens --attribution FILE.csv`: each part's direct share of the target's logit."""
    return read_csv(path, SHARES_RENAMED)
