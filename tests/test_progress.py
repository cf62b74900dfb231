"""The ingest's progress bar counts the sentences through the model and moves with each forward batch, so it
shows a rate and an ETA; beside it, how many sentences are written (on disk, their chunk marked done). A resumed
ingest starts the bar at the sentences already written."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from tqdm import tqdm

from atlas.ingestion.budget import Budget
from atlas.ingestion.corpus import check_corpus
from atlas.ingestion.pipeline import Settings, ingest
from atlas.model.load import LoadedModel
from atlas.store import Store
from tests.conftest import EWT_SAMPLE, cut_conllu


class Recorder:
    """What an ingest's bar was told: each update's step with the sentences then in chunks marked done, and each
    'written N' shown beside the bar with the same count."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.steps: list[tuple[int, int]] = []  # (step, sentences in chunks marked done)
        self.written: list[tuple[int, int]] = []  # (written shown, sentences in chunks marked done)
        self.totals: list[int | None] = []  # each bar's total

    def done(self) -> int:
        """Sentences in the chunks marked done (pack 'none': a chunk's examples are its sentences)."""
        return sum(_examples(marker) for marker in self.store.staging.glob("*/done/*.json"))

    def bar(self) -> type[tqdm]:
        """A tqdm class that tells this recorder what it is told."""
        recorder = self

        class Recording(tqdm):
            def __init__(self, *args: object, **kwargs: object) -> None:
                super().__init__(*args, **kwargs)
                recorder.totals.append(self.total)

            def update(self, n: float | None = 1) -> bool | None:
                recorder.steps.append((int(n or 0), recorder.done()))
                return super().update(n)

            def set_postfix_str(self, s: str = "", refresh: bool = True) -> None:
                if found := re.fullmatch(r"written (\d+)", s):
                    recorder.written.append((int(found[1]), recorder.done()))
                super().set_postfix_str(s, refresh)

        return Recording


def _examples(marker: Path) -> int:
    """The inputs of a chunk marked done, skipped ones included."""
    counts = json.loads(marker.read_text())
    return counts["examples"] + counts["skipped"]


def _ingest(corpus: Path, store: Store, model: LoadedModel, chunk_examples: int = 512) -> None:
    ingest(check_corpus(corpus), store, model, Settings(chunk_examples=chunk_examples), progress=True)


def test_the_bar_moves_with_each_forward_batch(tmp_path, model, monkeypatch):
    store = Store(tmp_path / "store")
    recorder = Recorder(store)
    monkeypatch.setattr("atlas.ingestion.pipeline.tqdm", recorder.bar())
    one_each = Budget(batch_weights=1, block_weights=10**9)  # a forward batch of one input each (read by rows)
    monkeypatch.setattr("atlas.ingestion.pipeline.budget_for", lambda _device: one_each)
    corpus = cut_conllu(EWT_SAMPLE, 40, tmp_path / "forty.conllu")
    _ingest(corpus, store, model)  # one chunk of 40 inputs
    steps = [n for n, _ in recorder.steps]
    assert recorder.totals == [40] and sum(steps) == 40  # a total known: tqdm shows a rate and an ETA
    assert steps == [1] * 40, steps  # one step per forward batch, by its inputs, not one per chunk
    assert all(done == 0 for _, done in recorder.steps)  # the bar moved while the chunk was still being run
    assert recorder.written[-1][0] == 40 and all(shown <= done for shown, done in recorder.written)


def test_written_counts_only_chunks_on_disk_and_a_resumed_ingest_starts_at_them(tmp_path, model, monkeypatch, capsys):
    from atlas.ingestion import pipeline

    store = Store(tmp_path / "store")
    corpus = cut_conllu(EWT_SAMPLE, 40, tmp_path / "forty.conllu")
    run_chunk, calls = pipeline._run_chunk, []

    def stop_at_the_second_chunk(*args: object) -> object:
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return run_chunk(*args)

    monkeypatch.setattr(pipeline, "_run_chunk", stop_at_the_second_chunk)
    with pytest.raises(KeyboardInterrupt):
        _ingest(corpus, store, model, chunk_examples=16)  # chunk 0 (16 sentences) written, then stopped
    monkeypatch.setattr(pipeline, "_run_chunk", run_chunk)
    recorder = Recorder(store)
    monkeypatch.setattr(pipeline, "tqdm", recorder.bar())
    capsys.readouterr()
    _ingest(corpus, store, model, chunk_examples=16)
    said = capsys.readouterr().err
    assert said.startswith("resuming run forty__") and ": 1 chunk(s) written before are kept\n" in said
    steps = [n for n, _ in recorder.steps]
    assert steps[0] == 16 and sum(steps) == 40 and len(steps) > 3, steps  # the written chunk at once, then batches
    assert [shown for shown, _ in recorder.written] == [0, 16, 32, 40]
    assert all(shown <= done for shown, done in recorder.written)  # 'written' only once the chunk is marked done
