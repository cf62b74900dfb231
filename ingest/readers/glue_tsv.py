"""GLUE data in its TSV formats (SST-2, MRPC, RTE, STS-B, QQP, QNLI, MNLI): the tasks and their readers.

Columns are found by their header names, lines split on tabs only (GLUE files hold unbalanced quotes),
a byte-order mark is dropped (MRPC). A malformed line is a one-line error naming the file and line.
A name that is not a folder is read as a hub data set through ``datasets`` (GLUE configuration).
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from atlas.errors import AtlasError, arg


@dataclass(frozen=True)
class TaskSpec:
    name: str
    text_a: str  # header name of the first text
    text_b: str | None  # of the second text, None for single-sentence tasks
    label: str  # of the label or score
    labels: tuple[str, ...] | None  # label values in class order; None: a regression score
    metrics: tuple[str, ...]  # the first is the one ablations report
    dev_file: str = "dev.tsv"
    hub: str = ""  # GLUE configuration name on the hub
    # the classes' names in the order of ``labels`` where they are numbered (the hub's names; RTE's files give either)
    label_names: tuple[str, ...] | None = None

    @property
    def n_labels(self) -> int:
        return 1 if self.labels is None else len(self.labels)


SCORES = (0.0, 5.0)  # the similarity scores of STS-B, GLUE's one regression task
TASKS = {
    spec.name: spec
    for spec in (
        TaskSpec(
            "SST-2",
            "sentence",
            None,
            "label",
            ("0", "1"),
            ("accuracy",),
            hub="sst2",
            label_names=("negative", "positive"),
        ),
        TaskSpec(
            "MRPC",
            "#1 String",
            "#2 String",
            "Quality",
            ("0", "1"),
            ("f1", "accuracy"),
            hub="mrpc",
            label_names=("not_equivalent", "equivalent"),
        ),
        TaskSpec(
            "RTE",
            "sentence1",
            "sentence2",
            "label",
            ("0", "1"),
            ("accuracy",),
            hub="rte",
            label_names=("entailment", "not_entailment"),
        ),
        TaskSpec("STS-B", "sentence1", "sentence2", "score", None, ("pearson", "spearman"), hub="stsb"),
        TaskSpec(
            "QQP",
            "question1",
            "question2",
            "is_duplicate",
            ("0", "1"),
            ("f1", "accuracy"),
            hub="qqp",
            label_names=("not_duplicate", "duplicate"),
        ),
        TaskSpec("QNLI", "question", "sentence", "label", ("entailment", "not_entailment"), ("accuracy",), hub="qnli"),
        TaskSpec(
            "MNLI",
            "sentence1",
            "sentence2",
            "gold_label",
            ("contradiction", "entailment", "neutral"),
            ("accuracy",),
            dev_file="dev_matched.tsv",
            hub="mnli",
        ),
    )
}


def _class_name(spec: TaskSpec, raw: str) -> str:
    """A label as the task's classes are spelt in ``labels``, where a file gives the class's name (RTE's files give
    words or numbers)."""
    if spec.label_names and raw in spec.label_names:
        return spec.labels[spec.label_names.index(raw)]
    return raw


@dataclass
class Examples:
    text_a: list[str]
    text_b: list[str] | None
    labels: np.ndarray  # class index (int64) or score (float32)
    lines: list[int] | None = None  # line of each example in its file

    def __len__(self) -> int:
        return len(self.text_a)

    def head(self, n: int | None) -> Examples:
        if n is None or n >= len(self):
            return self
        return Examples(self.text_a[:n], None if self.text_b is None else self.text_b[:n], self.labels[:n])


def task_spec(name: str) -> TaskSpec:
    wanted = name.upper().replace("_", "-")
    for key, spec in TASKS.items():
        if key in (wanted, wanted.replace("-", "")) or key.replace("-", "") == wanted.replace("-", ""):
            return spec
    raise AtlasError(f"{arg('task', repr(str(name)))}: unknown; one of {', '.join(TASKS)}")


def _label(spec: TaskSpec, raw: str, where: str) -> float | int:
    raw = raw.strip()
    if spec.labels is None:
        try:
            score = float(raw)
        except ValueError:
            raise AtlasError(f"{where}: score '{raw}' is not a number") from None
        low, high = SCORES
        if not (math.isfinite(score) and low <= score <= high):
            raise AtlasError(f"{where}: score '{raw}' is not from {low:g} to {high:g}")
        return score
    value = _class_name(spec, raw)
    if value not in spec.labels:
        raise AtlasError(f"{where}: label '{raw}' is not one of {', '.join(spec.labels)}")
    return spec.labels.index(value)


def read_tsv(spec: TaskSpec, path: Path) -> Examples:
    """One GLUE TSV file of a task."""
    try:
        text = path.read_text(encoding="utf-8-sig")
    except FileNotFoundError:
        raise AtlasError(f"{path}: no such file") from None
    except UnicodeDecodeError as exc:
        raise AtlasError(f"{path}: not UTF-8 ({exc.reason})") from None
    lines = text.splitlines()
    if not lines:
        raise AtlasError(f"{path}:1: empty file, expected a header line")
    header = lines[0].split("\t")
    wanted = [spec.text_a, spec.label] + ([spec.text_b] if spec.text_b else [])
    missing = [name for name in wanted if name not in header]
    if missing:
        raise AtlasError(f"{path}:1: header has no column {', '.join(repr(m) for m in missing)} ({spec.name} format)")
    col = {name: header.index(name) for name in wanted}
    text_a, text_b, labels, numbers = [], [], [], []
    for number, line in enumerate(lines[1:], start=2):
        if not line.strip():
            continue
        cells = line.split("\t")
        where = f"{path}:{number}"
        if len(cells) != len(header):  # more: a tab inside a text would shift the columns after it
            raise AtlasError(f"{where}: {len(cells)} tab-separated columns, expected {len(header)} as in the header")
        text_a.append(cells[col[spec.text_a]])
        if spec.text_b:
            text_b.append(cells[col[spec.text_b]])
        labels.append(_label(spec, cells[col[spec.label]], where))
        numbers.append(number)
    if not text_a:
        raise AtlasError(f"{path}: no examples")
    dtype = np.float32 if spec.labels is None else np.int64
    return Examples(text_a, text_b if spec.text_b else None, np.array(labels, dtype=dtype), numbers)


def load_split(spec: TaskSpec, data: str | os.PathLike[str], split: str) -> Examples:
    """``split`` ('train' or 'dev') of a task from a folder of GLUE TSV files, or a hub data set."""
    data = os.fspath(data)
    folder = Path(data)
    if folder.is_dir():
        return read_tsv(spec, folder / ("train.tsv" if split == "train" else spec.dev_file))
    if folder.exists():
        raise AtlasError(f"{arg('data', repr(str(data)))}: not a folder of GLUE TSV files")
    if data.startswith((".", "/", "~")) or data.count("/") > 1:
        raise AtlasError(f"{arg('data', repr(str(data)))}: no such folder")
    from atlas.model.identity import hub_unreachable

    unreachable = hub_unreachable()  # a mistyped folder fails at once, not after the hub's retries
    if unreachable is not None and not _cached(data):
        raise AtlasError(f"{arg('data', repr(str(data)))}: no such folder, and the hub is unreachable ({unreachable})")
    return _from_hub(spec, data, split)


def _cached(name: str) -> bool:
    """Whether ``datasets`` holds a hub data set of this name in its cache (where it looks when the hub is out of
    reach: ``datasets.load.CachedDatasetModuleFactory``)."""
    import datasets
    from datasets.naming import camelcase_to_snakecase

    *namespace, last = name.split("/")
    root = Path(datasets.config.HF_DATASETS_CACHE).expanduser() / "___".join([*namespace, camelcase_to_snakecase(last)])
    return any(path.is_dir() for path in root.glob("*/*/*"))


def _from_hub(spec: TaskSpec, name: str, split: str) -> Examples:
    import datasets

    hub_split = "train" if split == "train" else ("validation_matched" if spec.name == "MNLI" else "validation")
    try:
        ds = datasets.load_dataset(name, spec.hub, split=hub_split)
    except Exception as exc:  # the hub's errors have many types; the user gets the first line
        raise AtlasError(
            f"{arg('data', repr(str(name)))}: no such folder, and cannot load {spec.hub}/{hub_split} from the hub "
            f"({str(exc).splitlines()[0]})"
        ) from None
    columns = {
        "SST-2": ("sentence", None),
        "MRPC": ("sentence1", "sentence2"),
        "QQP": ("question1", "question2"),
        "MNLI": ("premise", "hypothesis"),
    }
    a, b = columns.get(spec.name, (spec.text_a, spec.text_b))
    if spec.labels is None:
        labels = np.array(ds["label"], dtype=np.float32)
    else:  # the hub names the classes otherwise (SST-2: negative, positive) and may order them otherwise (MNLI)
        names = getattr(ds.features["label"], "names", None) or list(spec.labels)
        wanted = [_class_name(spec, str(n)) for n in names]
        if sorted(wanted) != sorted(spec.labels):
            classes = list(spec.label_names or spec.labels)
            raise AtlasError(f"{arg('data', repr(str(name)))}: labels {names} do not match {spec.name}'s {classes}")
        order = np.array([spec.labels.index(w) for w in wanted], dtype=np.int64)
        try:
            raw = np.asarray(ds["label"], dtype=np.int64)
        except (TypeError, ValueError):
            given = arg("data", repr(str(name)))
            raise AtlasError(f"{given}: {spec.hub}/{hub_split}'s labels are not class numbers") from None
        if len(raw) and not (0 <= raw.min() and raw.max() < len(names)):  # -1: a test split's missing label
            raise AtlasError(f"{arg('data', repr(str(name)))}: {spec.hub}/{hub_split} has unlabelled examples")
        labels = order[raw]
    return Examples(list(ds[a]), list(ds[b]) if b else None, labels)
