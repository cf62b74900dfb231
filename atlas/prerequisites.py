"""What a catalogue entry needs in the store before it can answer, and the line that says so.

An entry whose results come from another command (``atlas distances``, ``atlas probe``, ...) or from a
kind of corpus (coreference mentions, FrameNet frames) would otherwise answer with an empty table.
``check`` refuses it with one line naming what to run first (exit status 1); a ``note`` is printed on
stderr beside an answer that is computed but differs from the paper's setting.
"""

from __future__ import annotations

from dataclasses import dataclass

import duckdb

from atlas.errors import AtlasError


@dataclass(frozen=True)
class Need:
    sql: str  # a count over the store, with the entry's parameters bound; 0 = the need is not met
    message: str  # formatted with the entry's parameters
    fatal: bool = True  # False: a note on stderr, the answer is still given


NEEDS: dict[str, Need] = {
    "head distances": Need(
        "SELECT count(*) FROM head_pairs WHERE run_id = $run",
        "'head distances' of run {run} are not computed yet: run 'atlas distances --run {run}' first",
    ),
    "probe results": Need(
        "SELECT count(*) FROM probes", "no probe results in the store: run 'atlas probe --train RUN --eval RUN' first"
    ),
    "probe weights": Need(
        "SELECT count(*) FROM head_scores WHERE run_id = $run AND analysis = 'attention probe'",
        "no probe was trained on run {run}: run 'atlas probe --train {run} --eval RUN' first",
    ),
    "pattern shares": Need(
        "SELECT count(*) FROM patterns", "no attention patterns in the store: run 'atlas patterns --run RUN' first"
    ),
    "coreference heads": Need(
        "SELECT count(*) FROM mentions WHERE run_id = $run",
        "run {run} has no coreference mentions: ingest a corpus with CorefUD 'Entity=' annotations "
        "(e.g. UD English GUM) with --pack window",
    ),
    "frame heads": Need(
        "SELECT count(*) FROM frames WHERE run_id = $run",
        "run {run} has no FrameNet frames: ingest FrameNet exemplars with --format framenet",
    ),
    "sep to sep": Need(
        "SELECT count(*) FROM examples WHERE run_id = $run AND n_sentences = 2",
        "run {run} has no two-segment inputs, so every input has one [SEP] (the paper's inputs are "
        "[CLS] a [SEP] b [SEP]: ingest with --pack pair)",
        fatal=False,
    ),
    "glue baselines": Need(
        "SELECT count(*) FROM task_models", "no task models in the store: run 'atlas finetune' first"
    ),
    "gradient importance": Need(
        "SELECT count(*) FROM attention_gradients", "no attention gradients in the store: run 'atlas grads' first"
    ),
    "head ablation": Need("SELECT count(*) FROM ablations", "no ablations in the store: run 'atlas ablate' first"),
    "layer ablation": Need("SELECT count(*) FROM ablations", "no ablations in the store: run 'atlas ablate' first"),
    "ablation summary": Need("SELECT count(*) FROM ablations", "no ablations in the store: run 'atlas ablate' first"),
    "head importance": Need(
        "SELECT count(*) FROM head_scores WHERE analysis = 'head importance'",
        "no head importance in the store: run 'atlas importance' first",
    ),
    "pruning curve": Need(
        "SELECT count(*) FROM ablations WHERE kind = 'pruned'",
        "no pruning results in the store: run 'atlas importance' first",
    ),
}


def check(con: duckdb.DuckDBPyConnection, name: str, params: dict[str, object]) -> list[str]:
    """Raise when the entry cannot answer yet; return the notes to print beside its answer."""
    need = NEEDS.get(name)
    if need is None:
        return []
    used = {k: v for k, v in params.items() if f"${k}" in need.sql}
    if con.execute(need.sql, used).fetchone()[0] > 0:
        return []
    message = need.message.format(**params)
    if need.fatal:
        raise AtlasError(message)
    return [f"note: {message}"]
