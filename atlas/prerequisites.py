"""What a catalogue entry needs in the store before it can answer, and the line that says so.

An entry whose results come from another command (``atlas distances``, ``atlas probe``, ...) or from a
kind of corpus (coreference mentions, FrameNet frames) would otherwise answer with an empty table.
``check`` refuses it with one line naming what to run first (exit status 1); a ``note`` is printed on
stderr beside an answer that is computed but differs from the paper's setting, or that leaves columns
empty because the run's inputs lack a kind of special token (a decoder has no separator).
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


# entries that find special tokens by tokens.role, absent (NULL) in runs ingested before it existed
ROLES_STORED = Need(
    "SELECT (count(*) = 0)::INTEGER FROM tokens WHERE run_id = $run AND special IS NOT NULL AND role IS NULL",
    "run {run} was ingested before special tokens had roles (tokens.role): remove it ('atlas rm {run}') and "
    "ingest it again",
)


def _lacking(roles: tuple[str, str], what: str) -> Need:
    """A note for a run whose inputs hold no special token of the roles (its tokenizer adds none)."""
    listed = ", ".join(f"'{r}'" for r in roles)
    return Need(
        f"SELECT count(*) FROM tokens WHERE run_id = $run AND role IN ({listed})",
        f"run {{run}}'s inputs hold no special token of role {roles[0]} or {roles[1]} (its tokenizer adds none, "
        f"e.g. a decoder's): {what}",
        fatal=False,
    )


NEEDS: dict[str, Need | tuple[Need, ...]] = {
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
    "sep to sep": (
        ROLES_STORED,
        _lacking(("sep", "eos"), "sep_sep, to_itself and to_other_sep are empty, rest_sep is 0"),
        Need(
            "SELECT count(*) FROM examples WHERE run_id = $run AND n_sentences = 2",
            "run {run} has no two-segment inputs, so every input has one [SEP] (the paper's inputs are "
            "[CLS] a [SEP] b [SEP]: ingest with --pack pair)",
            fatal=False,
        ),
    ),
    "entropy": (ROLES_STORED, _lacking(("cls", "bos"), "cls_entropy is empty")),
    "feature attention": ROLES_STORED,
    "cls attention by feature": (
        ROLES_STORED,
        _lacking(("cls", "bos"), "there is no [CLS] row, the answer is empty"),
        _lacking(("sep", "eos"), "sep is empty"),
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
    needs = NEEDS.get(name, ())
    notes = []
    for need in needs if isinstance(needs, tuple) else (needs,):
        used = {k: v for k, v in params.items() if f"${k}" in need.sql}
        if con.execute(need.sql, used).fetchone()[0] > 0:
            continue
        message = need.message.format(**params)
        if need.fatal:
            raise AtlasError(message)
        notes.append(f"note: {message}")
    return notes
