"""The pattern classifier on synthetic maps of each class, written straight into a store."""

from __future__ import annotations

import re

import numpy as np
import pytest

from atlas.patterns import classify
from atlas.store import Store

SEGMENTS = [0, 0, 0, 0, 0, 1, 1, 1, 1, 1]  # [CLS] a a a [SEP] b b b b [SEP]
SPECIAL = ["[CLS]", None, None, None, "[SEP]", None, None, None, None, "[SEP]"]
N = len(SEGMENTS)


def _rows(m: np.ndarray) -> np.ndarray:
    return m / m.sum(axis=1, keepdims=True)


def synthetic() -> dict[str, np.ndarray]:
    specials = np.array([s is not None for s in SPECIAL])
    own = np.array(SEGMENTS)[:, None] == np.array(SEGMENTS)[None, :]
    eye = np.eye(N)
    prev = np.eye(N, k=-1) + np.eye(N, k=1)
    return {
        "Vertical": _rows(np.where(specials[None, :], 1.0, 0.02) + 0 * eye),
        "Diagonal": _rows(prev + 0.01),
        "Vertical+Diagonal": _rows(prev + np.where(specials[None, :], 0.6, 0.01)),
        "Block": _rows(np.where(own & ~specials[None, :], 1.0, 0.01) + 0.5 * eye),
        "Heterogeneous": _rows(np.random.default_rng(0).random((N, N)) + 0.3),
    }


def test_each_synthetic_class_is_recognised(tmp_path):
    store = Store(tmp_path / "s")
    store.create()
    maps = synthetic()
    run = "synthetic"
    n_ex = len(maps)
    store.put(run, "runs", "run", {"run_id": run, "n_layers": 1, "n_heads": 1, "corpus": "synthetic"}, 1)
    store.put(
        run,
        "examples",
        "examples",
        {"run_id": run, "example_id": np.arange(n_ex), "n_sentences": 2, "n_tokens": N, "skipped": False},
        n_ex,
    )
    ex = np.repeat(np.arange(n_ex), N)
    tok = np.tile(np.arange(N), n_ex)
    store.put(
        run,
        "tokens",
        "tokens",
        {
            "run_id": run,
            "example_id": ex,
            "tok_idx": tok,
            "segment": np.tile(SEGMENTS, n_ex),
            "special": SPECIAL * n_ex,
            "word_idx": [None if s else i for _ in range(n_ex) for i, s in enumerate(SPECIAL)],
        },
        n_ex * N,
    )
    rows, edges = [], []
    cls = np.array([s == "[CLS]" for s in SPECIAL])
    sep = np.array([s == "[SEP]" for s in SPECIAL])
    for e, m in enumerate(maps.values()):
        for i in range(N):
            row = m[i]
            rows.append(
                (e, i, row[cls].sum(), row[sep].sum(), row[i - 1] if i else 0.0, row[i + 1] if i + 1 < N else 0.0)
                + (-(row * np.log(row)).sum(), row.argmax(), row[i], m[:, i].sum())
            )
            edges += [(e, i, j, m[i, j]) for j in range(N)]
    r = np.array(rows)
    store.put(
        run,
        "attn_rows",
        "rows",
        {
            "run_id": run,
            "example_id": r[:, 0],
            "layer": 0,
            "head": 0,
            "src_tok": r[:, 1],
            "to_cls": r[:, 2],
            "to_sep": r[:, 3],
            "to_prev": r[:, 4],
            "to_next": r[:, 5],
            "entropy": r[:, 6],
            "argmax_tok": r[:, 7],
            "to_self": r[:, 8],
            "to_dot_comma": 0.0,  # no punctuation
            "received": r[:, 9],
        },
        len(r),
    )
    g = np.array(edges)
    store.put(
        run,
        "attn_edges",
        "edges",
        {
            "run_id": run,
            "example_id": g[:, 0],
            "layer": 0,
            "head": 0,
            "src_tok": g[:, 1],
            "dst_tok": g[:, 2],
            "weight": g[:, 3],
        },
        len(g),
    )
    assert classify(store, run) == n_ex
    got = store.connect().execute("SELECT example_id, pattern FROM patterns ORDER BY example_id").fetchall()
    assert [p for _, p in got] == list(maps)


def _synthetic_map(kind: str, n: int, rng: np.random.Generator) -> np.ndarray:
    half = n // 2
    specials = np.zeros(n, dtype=bool)
    specials[[0, half, n - 1]] = True
    seg = np.arange(n) > half
    noise = rng.random((n, n)) * 0.05
    shape = {
        "Vertical": np.where(specials[None, :], 1.0, 0.0),
        "Diagonal": np.eye(n, k=-1) + np.eye(n, k=1),
        "Vertical+Diagonal": np.eye(n, k=-1) + np.where(specials[None, :], 0.7, 0.0),
        "Block": np.where(seg[:, None] == seg[None, :], 1.0, 0.0),
        "Heterogeneous": rng.random((n, n)) ** 3,
    }[kind]
    return _rows(shape + noise + 1e-3)


def test_cnn_learns_synthetic_classes():
    import torch

    from atlas.pattern_cnn import cross_validated_f1, resize
    from atlas.patterns import CLASSES

    rng = np.random.default_rng(0)
    maps, labels = [], []
    for label, kind in enumerate(CLASSES):
        for _ in range(16):
            maps.append(resize(_synthetic_map(kind, int(rng.integers(12, 40)), rng))[0])
            labels.append(label)
    assert cross_validated_f1(torch.stack(maps), torch.tensor(labels)) > 90


def test_cnn_labels_file_errors(tmp_path):
    from click.testing import CliRunner

    from atlas.cli import cli

    bad = tmp_path / "labels.csv"
    bad.write_text("example_id,layer,pattern\n0,1,Vertical\n")
    store = Store(tmp_path / "s")
    store.create()
    store.put("r", "runs", "run", {"run_id": "r", "model_source": "x", "model_hash": "y", "random_init": False}, 1)
    result = CliRunner().invoke(cli, ["patterns", "--store", str(store.root), "--run", "r", "--labels", str(bad)])
    assert result.exit_code == 1 and "missing columns head" in result.output, result.output
    for rows, said in [("", "no labels"), ("0,1,1,Vertical\n0,1,2,Vertical\n", "every label is 'Vertical'")]:
        bad.write_text("example_id,layer,head,pattern\n" + rows)
        result = CliRunner().invoke(cli, ["patterns", "--store", str(store.root), "--run", "r", "--labels", str(bad)])
        assert result.exit_code == 1, result.output
        assert result.output == f"Error: --labels '{bad}': {said}; a classifier is learnt from two patterns or more\n"


HEADER = "example_id,layer,head,pattern,note\n"
LABEL_ERRORS = {  # rows after the header -> (line, what the message says)
    "missing field": ("0,1,1,Vertical,a\n1,2,2,Block\n", 3, "4 fields; the header names 5"),
    "extra field": ("0,1,1,Vertical,a,b\n", 2, "6 fields; the header names 5"),
    "bad layer": ("0,1,1,Vertical,\n\n1,x,2,Block,\n", 4, "layer 'x': expected a whole number from 1"),
    "layer 0": ("0,0,1,Vertical,\n", 2, "layer '0': expected a whole number from 1"),
    "bad head": ("0,1,1,Vertical,\n1,2,-3,Block,\n", 3, "head '-3': expected a whole number from 1"),
    "bad example": ("x1,1,1,Vertical,\n", 2, "example_id 'x1': expected a whole number from 0"),
    "huge example": ("0,1,1,Vertical,\n" + "9" * 20 + ",1,1,Block,\n", 3, f"example_id '{'9' * 20}': larger than any"),
    "huge head": ("0,1,1,Vertical,\n0,1," + "1" * 5000 + ",Block,\n", 3, "larger than any head"),
    "unknown label": ("0,1,1,Vertical,\n0,1,2,vertical,\n", 3, "unknown pattern 'vertical'"),
    "duplicate": ("0,1,1,Vertical,\n0,2,1,Block,\n0,1,1,Block,\n", 4, "layer 1, head 1 is labelled on line 2"),
    "not utf-8": ("0,1,1,Vertical,\n0,1,2,Block,\xff\n", 3, "not UTF-8 text"),
}


def test_labels_file_errors_name_the_file_and_line(tmp_path):
    from atlas.errors import AtlasError
    from atlas.pattern_cnn import read_labels

    path = tmp_path / "labels.csv"
    for case, (rows, line, says) in LABEL_ERRORS.items():
        path.write_bytes((HEADER + rows).encode("latin-1"))
        try:
            read_labels(path)
        except AtlasError as exc:
            assert str(exc).startswith(f"{path}:{line}: ") and says in str(exc), (case, str(exc))
        else:
            raise AssertionError(f"{case}: read without an error")
    path.write_text("example_id,layer,pattern\n0,1,Vertical\n")
    with pytest.raises(AtlasError, match=f"^{re.escape(str(path))}:1: missing columns head "):
        read_labels(path)
    path.write_text(HEADER + '0,1,1,Vertical,x\r\n\r\n"3", 2 ,2,Block,"a, b"\r\n00009223372036854775807,1,1,Block,\n')
    labels = read_labels(path)
    assert labels.rows() == [(0, 1, 1, "Vertical", 2), (3, 2, 2, "Block", 4), (2**63 - 1, 1, 1, "Block", 5)]


def test_labels_beyond_the_run_name_the_line(tmp_path, model):
    from atlas.errors import AtlasError
    from atlas.pattern_cnn import train_and_classify
    from tests.conftest import EWT_SAMPLE, cut_conllu, make_store

    store, run_id = make_store(tmp_path / "store", cut_conllu(EWT_SAMPLE, 2, tmp_path / "two.conllu"), model)
    path = tmp_path / "labels.csv"
    for rows, says in (
        ("0,1,1,Vertical,\n1,6,12,Block,\n0,7,1,Block,\n", ":4: layer 7, head 1: the model of run"),
        ("0,1,1,Vertical,\n1,1,13,Block,\n", ":3: layer 1, head 13: the model of run"),
        ("0,1,1,Vertical,\n2,1,1,Block,\n", ":3: example 2 is not an input of run"),
    ):
        path.write_text(HEADER + rows)
        with pytest.raises(AtlasError) as caught:
            train_and_classify(store, run_id, path, progress=False)
        assert str(caught.value).startswith(str(path)) and says in str(caught.value), str(caught.value)


def test_the_cnn_classes_a_run_with_a_progress_bar_unless_quiet(tmp_path, model):
    """'atlas patterns --labels' recomputes every input's maps: a progress bar on stderr, none with --quiet."""
    from click.testing import CliRunner

    from atlas.cli import cli
    from tests.conftest import EWT_SAMPLE, cut_conllu, make_store

    store, run_id = make_store(tmp_path / "store", cut_conllu(EWT_SAMPLE, 4, tmp_path / "four.conllu"), model)
    kinds = ["Vertical", "Diagonal"] * 6  # two classes of six labels each: 5-fold cross-validation runs
    rows = [f"{i % 4},{1 + i % 6},{1 + i},{kind}," for i, kind in enumerate(kinds)]
    path = tmp_path / "labels.csv"
    path.write_text(HEADER + "\n".join(rows) + "\n")
    args = ["patterns", "--store", str(store.root), "--run", run_id, "--labels", str(path)]
    shown, quiet = CliRunner().invoke(cli, args), CliRunner().invoke(cli, [*args, "--quiet"])
    assert shown.exit_code == 0 and quiet.exit_code == 0, shown.output + quiet.output
    assert "pattern maps: 100%" in shown.stderr and "pattern maps" not in quiet.stderr
    assert shown.stdout.startswith("CNN: cross-validated macro F1") and shown.stdout == quiet.stdout
