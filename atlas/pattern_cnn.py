"""The paper's route to pattern classes (Kovaleva et al. Section 4.1): a small CNN on labelled maps.

Maps are the run's dense attention maps (recomputed with the run's model), resized to 32 x 32. A labels
file (CSV: example_id, layer, head, pattern; layers and heads 1-based as the queries show them) gives
the training maps; 5-fold stratified cross-validation reports macro F1, then a model trained on every
label classes every map of the run into ``patterns`` (method 'cnn').
"""

from __future__ import annotations

import csv
import re
from pathlib import Path

import numpy as np
import polars as pl
import torch
from sklearn.metrics import f1_score
from sklearn.model_selection import StratifiedKFold
from torch import nn
from tqdm import tqdm

from atlas.errors import AtlasError, arg
from atlas.patterns import CLASSES
from atlas.recompute import dense_maps, run_model, stored_inputs
from atlas.store import Store

LABEL_COLUMNS = ("example_id", "layer", "head", "pattern")  # of a labels file (more columns are left out)
LARGEST = 2**63 - 1  # the labels' columns are Int64
SIZE = 32
EPOCHS = 40


def resize(attn: np.ndarray) -> torch.Tensor:
    """``[..., n, n]`` maps as ``[..., SIZE, SIZE]`` (area interpolation), values rescaled per map."""
    maps = torch.from_numpy(attn).float().reshape(-1, 1, *attn.shape[-2:])
    small = nn.functional.interpolate(maps, size=(SIZE, SIZE), mode="area")
    return small / small.amax(dim=(-2, -1), keepdim=True).clamp(min=1e-9)


def network() -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(1, 8, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(8, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(16 * (SIZE // 4) ** 2, len(CLASSES)),
    )  # fmt: skip


def fit(x: torch.Tensor, y: torch.Tensor, seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    model = network()
    optimiser = torch.optim.Adam(model.parameters(), lr=1e-3)
    order = np.random.default_rng(seed)
    for _ in range(EPOCHS):
        for batch in np.array_split(order.permutation(len(y)), max(1, len(y) // 32)):
            loss = nn.functional.cross_entropy(model(x[batch]), y[batch])
            optimiser.zero_grad()
            loss.backward()
            optimiser.step()
    return model.eval()


def cross_validated_f1(x: torch.Tensor, y: torch.Tensor, folds: int = 5, seed: int = 0) -> float:
    """Macro F1 (percent) over the classes present, predictions pooled over stratified folds."""
    predicted = np.zeros(len(y), dtype=np.int64)
    splitter = StratifiedKFold(n_splits=folds, shuffle=True, random_state=seed)
    for train, test in splitter.split(np.zeros(len(y)), y.numpy()):
        model = fit(x[train], y[train], seed)
        with torch.no_grad():
            predicted[test] = model(x[test]).argmax(dim=-1).numpy()
    return 100 * float(f1_score(y.numpy(), predicted, average="macro"))


def read_labels(path: Path) -> pl.DataFrame:
    """The labels file's rows (``LABEL_COLUMNS`` and the ``line`` each is on). A malformed row is refused with
    its file:line: a field missing or extra, an example id, layer or head that is not a whole number (layers
    and heads from 1), an unknown pattern, a map labelled twice."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise AtlasError(f"{arg('labels', repr(str(path)))}: cannot read it ({exc.strerror or exc})") from None
    lines = data.split(b"\n")
    header = _fields(path, 1, lines[0])
    missing = [column for column in LABEL_COLUMNS if column not in header]
    if missing:
        raise AtlasError(f"{path}:1: missing columns {', '.join(missing)} (the first line names them)")
    for column in LABEL_COLUMNS:
        if header.count(column) > 1:
            raise AtlasError(f"{path}:1: column {column} is named twice")
    at = {column: header.index(column) for column in LABEL_COLUMNS}
    rows: list[tuple[int, int, int, str, int]] = []
    seen: dict[tuple[int, int, int], int] = {}
    for number, line in enumerate(lines[1:], start=2):
        if not line.strip():
            continue
        fields = _fields(path, number, line)
        if len(fields) != len(header):
            raise AtlasError(f"{path}:{number}: {len(fields)} fields; the header names {len(header)}")
        example, layer, head = (_whole(path, number, column, fields[at[column]]) for column in LABEL_COLUMNS[:3])
        pattern = fields[at["pattern"]]
        if pattern not in CLASSES:
            raise AtlasError(f"{path}:{number}: unknown pattern {pattern!r}; use {', '.join(CLASSES)}")
        if (example, layer, head) in seen:
            where = f"example {example}, layer {layer}, head {head}"
            raise AtlasError(f"{path}:{number}: {where} is labelled on line {seen[example, layer, head]} already")
        seen[example, layer, head] = number
        rows.append((example, layer, head, pattern, number))
    schema = {"example_id": pl.Int64, "layer": pl.Int64, "head": pl.Int64, "pattern": pl.Utf8, "line": pl.Int64}
    return pl.DataFrame(rows, schema=schema, orient="row")


def _fields(path: Path, number: int, line: bytes) -> list[str]:
    """The comma-separated fields of line ``number`` (read line by line, so an error names the first bad one)."""
    try:
        text = line.decode("utf-8-sig" if number == 1 else "utf-8").removesuffix("\r")
        return [field.strip() for field in next(csv.reader([text]), [])]
    except UnicodeDecodeError:
        raise AtlasError(f"{path}:{number}: not UTF-8 text") from None
    except csv.Error as exc:
        raise AtlasError(f"{path}:{number}: {exc}") from None


def _whole(path: Path, number: int, column: str, value: str) -> int:
    least, why = (0, "examples.example_id") if column == "example_id" else (1, "1-based, as the queries show them")
    digits = value.lstrip("0") or "0"  # (int() refuses more than 4300 digits)
    if re.fullmatch(r"[0-9]+", value) and (len(digits) > len(str(LARGEST)) or int(digits) > LARGEST):
        raise AtlasError(f"{path}:{number}: {column} {value!r}: larger than any {column} ({why})")
    if not re.fullmatch(r"[0-9]+", value) or int(digits) < least:
        raise AtlasError(f"{path}:{number}: {column} {value!r}: expected a whole number from {least} ({why})")
    return int(digits)


def train_and_classify(
    store: Store, run_id: str, labels_path: Path, progress: bool = True, model: str | None = None
) -> tuple[float, int]:
    """Cross-validated macro F1 of the CNN on the labels, and the number of maps classed (``model``: see
    ``run_model``)."""
    labels = read_labels(labels_path)
    classes = sorted(labels["pattern"].unique())
    if len(classes) < 2:
        given = arg("labels", repr(str(labels_path)))
        said = f"every label is '{classes[0]}'" if classes else "no labels"
        raise AtlasError(f"{given}: {said}; a classifier is learnt from two patterns or more")
    lm = run_model(store, run_id, model=model)
    inputs = stored_inputs(store, run_id)
    examples = {item.example_id for item in inputs}
    for row in labels.iter_rows(named=True):
        where = f"{labels_path}:{row['line']}"
        if row["layer"] > lm.n_layers or row["head"] > lm.n_heads:
            raise AtlasError(
                f"{where}: layer {row['layer']}, head {row['head']}: the model of run '{run_id}' has "
                f"{lm.n_layers} layers of {lm.n_heads} heads"
            )
        if row["example_id"] not in examples:
            raise AtlasError(f"{where}: example {row['example_id']} is not an input of run '{run_id}' (or was skipped)")
    wanted = {(r["example_id"], r["layer"] - 1, r["head"] - 1): r["pattern"] for r in labels.iter_rows(named=True)}
    xs, ys, all_maps, keys = [], [], [], []
    maps = dense_maps(lm, inputs)
    for item, attn in tqdm(maps, total=len(inputs), desc="pattern maps", unit="input", disable=not progress):
        small = resize(attn).reshape(lm.n_layers, lm.n_heads, 1, SIZE, SIZE)
        all_maps.append(small.reshape(-1, 1, SIZE, SIZE))
        keys += [(item.example_id, layer, head) for layer in range(lm.n_layers) for head in range(lm.n_heads)]
        for (example, layer, head), pattern in wanted.items():
            if example == item.example_id:
                xs.append(small[layer, head])
                ys.append(CLASSES.index(pattern))
    given = arg("labels", repr(str(labels_path)))
    if len(ys) < 10:
        raise AtlasError(f"{given}: {len(ys)} labelled maps found in run '{run_id}'; need 10 or more")
    x, y = torch.stack(xs), torch.tensor(ys)
    if np.bincount(ys).max() < 5:
        raise AtlasError(f"{given}: 5-fold cross-validation needs a class with 5 or more labels")
    try:
        f1 = cross_validated_f1(x, y)
    except ValueError as exc:
        raise AtlasError(f"{given}: {exc}") from None
    model = fit(x, y)
    with torch.no_grad():
        predicted = torch.cat([model(chunk).argmax(dim=-1) for chunk in torch.cat(all_maps).split(4096)]).numpy()
    key = np.array(keys)
    columns = {
        "run_id": run_id,
        "example_id": key[:, 0],
        "layer": key[:, 1],
        "head": key[:, 2],
        "pattern": [CLASSES[i] for i in predicted],
        "method": "cnn",
    }
    store.put(run_id, "patterns", "patterns_cnn", columns, len(keys))
    return f1, len(keys)
