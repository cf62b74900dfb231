"""The ingest's progress bar counts written sentences: it reaches the total only when every chunk is on disk."""

from __future__ import annotations

from tqdm import tqdm

from atlas.ingestion.corpus import check_corpus
from atlas.ingestion.pipeline import Settings, ingest
from atlas.store import Store
from tests.conftest import EWT_SAMPLE, cut_conllu


def test_progress_reaches_the_total_only_when_every_chunk_is_written(tmp_path, model, monkeypatch):
    store = Store(tmp_path / "store")
    seen: list[tuple[int, int]] = []

    class Recording(tqdm):
        def update(self, n: int = 1) -> bool | None:
            shown = super().update(n)
            seen.append((self.n, len(list(store.staging.glob("*/done/*.json")))))  # count, chunks marked done
            return shown

    monkeypatch.setattr("atlas.ingestion.pipeline.tqdm", Recording)
    corpus = cut_conllu(EWT_SAMPLE, 10, tmp_path / "ten.conllu")
    ingest(check_corpus(corpus), store, model, Settings(chunk_examples=4), progress=True)
    assert [n for n, _ in seen] == [4, 8, 10]  # one step per chunk written: 4, 4 and 2 sentences
    assert all(n <= min(4 * written, 10) for n, written in seen)
