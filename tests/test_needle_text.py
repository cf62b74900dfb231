"""The needle probe on a text haystack (``--format needle``, the shipped WikiText-103 sample), built as Wu et al.'s
released ``retrieval_head_detection.py`` builds it (``tests/long_reference.py``): a random Llama-shaped decoder with
grouped-query attention and a Llama 3 tokenizer (a BOS before each text) trained offline on the shipped samples."""

from __future__ import annotations

from pathlib import Path

import duckdb
import numpy as np
import pytest
import torch
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

import atlas
from atlas.errors import AtlasError
from atlas.ingestion.readers.needle import ANSWER, NEEDLE, NEW_TOKENS, PROMPT, QUESTION
from tests import long_reference as ref
from tests.tokenizers_helpers import llama3_bpe, save

LENGTHS, DEPTHS = (240, 320), (0, 40, 100)  # the needle and question take 129 pieces of this tokenizer's


def tiny_llama(folder: Path) -> Path:
    """A random Llama of 2 layers x 4 heads (2 key/value heads) with its language-model head, saved with its
    tokenizer."""
    tok = llama3_bpe()
    config = AutoConfig.for_model(
        "llama", hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=512, vocab_size=len(tok), bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id, tie_word_embeddings=False,
    )  # fmt: skip
    torch.manual_seed(0)
    AutoModelForCausalLM.from_config(config).save_pretrained(folder)
    return save(tok, folder)


@pytest.fixture(scope="module")
def probe(tmp_path_factory) -> tuple[Path, Path, str]:
    top = tmp_path_factory.mktemp("needle-text")
    model = tiny_llama(top / "llama")
    store = top / "store"
    run = atlas.api.ingest(None, str(model), store, format="needle", lengths=list(LENGTHS), depths=list(DEPTHS),
                           dense=True, progress=False).run_id  # fmt: skip
    return store, model, run


def _inputs(store: Path, run: str) -> list[dict]:
    con = duckdb.connect(str(store / "atlas.duckdb"), read_only=True)
    examples = con.execute(
        "SELECT example_id, n_tokens, context_length, depth_percent, needle_start, needle_end, generated_start, "
        "n_generated, needle_recall FROM examples WHERE run_id = ? ORDER BY example_id",
        [run],
    ).pl()
    ids = con.execute(
        "SELECT example_id, list(piece_id ORDER BY tok_idx) FROM tokens WHERE run_id = ? GROUP BY example_id", [run]
    ).fetchall()
    con.close()
    pieces = dict(ids)
    return [{**row, "ids": pieces[row["example_id"]]} for row in examples.iter_rows(named=True)]


def test_each_input_is_their_prompt_with_the_needle_at_a_sentence_boundary(probe):
    store, model, run = probe
    tok = AutoTokenizer.from_pretrained(model)
    inputs = _inputs(store, run)
    assert [(x["context_length"], x["depth_percent"]) for x in inputs] == [(n, d) for n in LENGTHS for d in DEPTHS]
    depths: list[int] = []
    for x in inputs:
        prompt = x["ids"][: x["generated_start"]]
        assert prompt[0] == tok.bos_token_id and tok.bos_token_id not in prompt[1:]
        assert x["n_tokens"] <= x["context_length"] and x["n_tokens"] == x["generated_start"] + x["n_generated"]
        text = tok.decode(prompt[1:])
        assert text.endswith(PROMPT.format(question=QUESTION))
        at = text.index(NEEDLE)
        before = text[:at].rstrip()
        if x["depth_percent"] == 0:
            assert before == ""
        elif x["depth_percent"] < 100:  # after a sentence's '.', or first where none comes before the depth
            assert before == "" or before.endswith(".")
        depths.append(len(before))
        if x["depth_percent"] == 100:
            assert text[at + len(NEEDLE) :].startswith("Based on the content")
        # the answer's span as their find_needle_idx finds it in the prompt (the BOS is the prompt's first id)
        answer = tok.encode(ANSWER, add_special_tokens=False)
        assert (x["needle_start"], x["needle_end"]) == ref.find_needle_idx(prompt, answer)
    assert depths[3] < depths[4] < depths[5], "deeper in the longer context"


def test_the_continuation_is_their_step_by_step_greedy_decode_and_its_recall_theirs(probe):
    store, model, run = probe
    tok = AutoTokenizer.from_pretrained(model)
    lm = AutoModelForCausalLM.from_pretrained(model, attn_implementation="eager")
    stop = {i for i in range(len(tok)) if tok.decode([i]) == "\n"}
    assert stop, "the tokenizer has a newline token"
    for x in _inputs(store, run):
        prompt, generated = x["ids"][: x["generated_start"]], x["ids"][x["generated_start"] :]
        decoded, _ = ref.greedy_decode(lm, prompt, NEW_TOKENS, stop)
        assert generated == decoded
        assert len(generated) == NEW_TOKENS or generated[-1] in stop
        response = tok.decode(generated, skip_special_tokens=True).strip()
        assert x["needle_recall"] == pytest.approx(ref.rouge1_recall(ANSWER, response), abs=1e-12)


def test_the_run_keeps_the_models_key_value_heads_and_a_profile(probe):
    store, _, run = probe
    st = atlas.open(store)
    assert st.sql(f"SELECT n_heads, n_kv_heads FROM runs WHERE run_id = '{run}'").rows() == [(4, 2)]
    streaming = st.query("streaming heads", run=run, window_size=512)  # the longest input: 320
    assert np.allclose(streaming["kept_share"].to_numpy(), 1.0, atol=1e-6)
    assert streaming["kv_head"].to_list() == [1, 1, 2, 2] * 2


def test_bad_probes_are_refused_in_one_line(tmp_path, probe):
    _, model, _ = probe
    store = tmp_path / "store"
    refusals = [
        ({"lengths": [240], "model": None}, "is an encoder"),
        ({"model": str(model)}, "give the context lengths"),
        ({"lengths": [240], "model": str(model), "corpus": str(tmp_path)}, "leave it out"),
        ({"lengths": [240], "model": str(model), "haystack": str(tmp_path / "none.txt")}, "no such file"),
        ({"lengths": [240], "model": str(model), "depths": [101]}, "expected percents"),
        ({"lengths": [240], "model": str(model), "question": "Why?"}, "add needle"),
        ({"lengths": [9999], "model": str(model)}, "longer than"),
        ({"lengths": [150], "model": str(model)}, r"too short for the needle and the question \(129 pieces\)"),
    ]
    for given, said in refusals:
        given = {"corpus": None, **given}
        with pytest.raises(AtlasError, match=said) as refused:
            atlas.api.ingest(given.pop("corpus"), given.pop("model"), store, format="needle", progress=False, **given)
        assert "\n" not in str(refused.value)
        assert not list((store / "data").glob("*/examples")) if (store / "data").exists() else True


def test_a_prompt_run_in_parts_continues_alike(probe, monkeypatch):
    """The prompt's pass in parts of PREFILL tokens (a long context's, whose maps would not fit at once) gives the
    same continuation as the ingest's."""
    from atlas.model import continuation
    from atlas.model.load import load_model

    store, model, run = probe
    lm = load_model(str(model), auto_class=continuation.causal_lm())
    monkeypatch.setattr(continuation, "PREFILL", 7)
    x = _inputs(store, run)[-1]
    prompt, generated = x["ids"][: x["generated_start"]], x["ids"][x["generated_start"] :]
    stop = frozenset(i for i in range(len(lm.tokenizer)) if lm.tokenizer.decode([i]) == "\n")
    again = continuation.greedy_continuation(lm, prompt[:1], prompt[1:], NEW_TOKENS, stop, torch.device("cpu"))
    assert again == generated
