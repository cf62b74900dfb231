"""What an ingest says of its run beside its counts, read back from the store once the run is published: the
pieces stored, those of its words that are the tokenizer's unknown token, and what the corpus's reader says
(``Reader.summary``: a text run's cut pairs, the pairs and the unpaired paragraphs it left out, FrameNet's dropped
sentences, CoNLL-U texts not as written)."""

from __future__ import annotations

from atlas.ingestion.readers import reader
from atlas.ingestion.readers.corpus_info import CorpusInfo
from atlas.store import Store


def summary(
    store: Store,
    run_id: str,
    corpus: CorpusInfo,
    n_examples: int,
    text: str,
    tokenizer: object,
    rollout_missed: bool = False,
) -> dict:
    """``Ingested``'s fields beyond the counts, for the run ``run_id`` of ``store`` (``n_examples``: its inputs;
    ``text``: what the model read, ``--text``): ``n_tokens``, ``n_unknown`` (None where the tokenizer has no unknown
    token of its own: not counted where it is also its bos, eos, cls or sep, GPT-2's <|endoftext|>), the reader's
    own, and where inputs read by rows have no rollout (``rollout_missed``), ``longest_rollout``: the longest input
    that has one."""
    unknown = getattr(tokenizer, "unk_token_id", None)
    others = {getattr(tokenizer, f"{role}_token_id", None) for role in ("bos", "eos", "cls", "sep")}
    if unknown is None or unknown in others:
        counted = "NULL"
    else:
        counted = f"count(*) FILTER (WHERE special IS NULL AND piece_id = {int(unknown)})"
    con = store.connect()  # one connection for what the store tells of the run
    try:
        sql = f"SELECT count(*), {counted} FROM tokens WHERE run_id = ?"
        n_tokens, n_unknown = con.execute(sql, [run_id]).fetchone()

        def count_examples(condition: str) -> int:
            sql = f"SELECT count(*) FILTER (WHERE {condition}) FROM examples WHERE run_id = ?"
            return con.execute(sql, [run_id]).fetchone()[0]

        said = reader(corpus.fmt).summary(corpus, text, n_examples, count_examples)
        if rollout_missed:
            sql = ("SELECT max(n_tokens) FROM examples WHERE run_id = ? AND example_id IN "
                   "(SELECT example_id FROM rollout WHERE run_id = ?)")  # fmt: skip
            said["longest_rollout"] = con.execute(sql, [run_id, run_id]).fetchone()[0]
    finally:
        con.close()
    return {"n_tokens": n_tokens, "n_unknown": n_unknown, **said}
