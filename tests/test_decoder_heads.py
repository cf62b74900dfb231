"""The heads decoder researchers look for: previous-token, duplicate-token and induction heads (TransformerLens's
head_detector.py) and head confidence (Voita et al. 2019), against references written from those definitions on
dense maps of transformers' own eager attention; and the repeated-token corpus (--format repeated) that probes
them, on the sample decoder samples/models/induction-2l, whose heads are known."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import polars as pl
import pytest
import torch
from click.testing import CliRunner
from tokenizers_helpers import gpt2_bpe, save
from transformers import AutoConfig, AutoModel, AutoTokenizer

import atlas
from atlas.catalogue import resolve
from atlas.cli import cli
from atlas.errors import AtlasError
from atlas.ingestion.readers.repeated import Repeated, draw, vocabulary
from atlas.plot import figure
from tests.conftest import EWT_SAMPLE, ROOT, cut_conllu

INDUCTION = ROOT / "samples" / "models" / "induction-2l"
PATTERNS = ("previous-token heads", "duplicate-token heads", "induction heads")


# references: TransformerLens's head_detector.py (detect_head, error_measure 'mul', exclude_bos and
# exclude_current_token False) and Voita et al.'s confidence, in plain numpy


def previous_pattern(ids: np.ndarray) -> np.ndarray:
    """get_previous_token_head_detection_pattern: ones below the main diagonal."""
    n = len(ids)
    pattern = np.zeros((n, n))
    pattern[1:, :-1] = np.eye(n - 1)
    return np.tril(pattern)


def duplicate_pattern(ids: np.ndarray) -> np.ndarray:
    """get_duplicate_token_head_detection_pattern: same token, diagonal cleared, lower triangle."""
    tiled = np.tile(ids, (len(ids), 1))
    equal = (tiled == tiled.T).astype(int)
    np.fill_diagonal(equal, 0)
    return np.tril(equal).astype(float)


def induction_pattern(ids: np.ndarray) -> np.ndarray:
    """get_induction_head_detection_pattern: the duplicate pattern rolled one column right, column 0 cleared."""
    shifted = np.roll(duplicate_pattern(ids), 1, axis=1)
    shifted[:, 0] = 0
    return np.tril(shifted)


DETECTION = {
    "previous-token heads": previous_pattern,
    "duplicate-token heads": duplicate_pattern,
    "induction heads": induction_pattern,
}


def detect(maps: list[tuple[np.ndarray, np.ndarray]], name: str) -> np.ndarray:
    """Per head, the mean over inputs of (attention x pattern).sum() / attention.sum() (compute_head_attention_
    similarity_score, 'mul'); inputs of one token are refused by detect_head, left out."""
    scores = []
    for att, ids in maps:
        if len(ids) < 2:
            continue
        pattern = DETECTION[name](ids)
        scores.append((att * pattern).sum(axis=(2, 3)) / att.sum(axis=(2, 3)))
    return np.mean(scores, axis=0)


def confidence(maps: list[tuple[np.ndarray, np.ndarray]], special: set[int]) -> np.ndarray:
    """Per head, the mean over every real token's row (special tokens' rows left out) of the row's largest weight."""
    tops = [att[:, :, [i for i, t in enumerate(ids) if t not in special]].max(axis=3) for att, ids in maps]
    return np.concatenate(tops, axis=2).mean(axis=2)


def per_input(st: atlas.Atlas, run: str, column: str) -> list[list]:
    """A column of the run's tokens, input by input (in example order), each in token order."""
    sql = f"SELECT list({column} ORDER BY tok_idx) AS v FROM tokens WHERE run_id = '{run}' GROUP BY example_id"
    return st.sql(sql + " ORDER BY example_id")["v"].to_list()


def eager_maps(st: atlas.Atlas, run: str, folder: Path | str) -> list[tuple[np.ndarray, np.ndarray]]:
    """Each input of the run, as its stored token ids, through transformers' eager attention."""
    model = AutoModel.from_pretrained(folder, attn_implementation="eager", dtype=torch.float32).eval()
    out = []
    for ids in per_input(st, run, "piece_id"):
        with torch.inference_mode():
            att = model(input_ids=torch.tensor([ids]), output_attentions=True).attentions
        out.append((torch.stack([a[0] for a in att]).numpy().astype(np.float64), np.array(ids)))
    return out


def specials(folder: Path | str) -> set[int]:
    tok = AutoTokenizer.from_pretrained(folder)
    return {i for i in (tok.cls_token_id, tok.sep_token_id, tok.bos_token_id, tok.eos_token_id) if i is not None}


def grid(frame: pl.DataFrame, column: str = "score") -> np.ndarray:
    heads = frame.sort("layer", "head")
    return heads[column].to_numpy().reshape(heads["layer"].max(), heads["head"].max())


def tiny_gpt2(folder: Path) -> Path:
    """A random GPT-2 of 2 layers x 4 heads (no special token added to its inputs), as tests/test_families.py."""
    tok = gpt2_bpe()
    config = AutoConfig.for_model(
        "gpt2", n_embd=32, n_layer=2, n_head=4, n_positions=128, initializer_range=0.4, vocab_size=len(tok),
        bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id,
    )  # fmt: skip
    torch.manual_seed(0)
    AutoModel.from_config(config).save_pretrained(folder)
    return save(tok, folder)


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, tuple[atlas.Atlas, str, str | Path]]:
    """Dense runs: an encoder (the embedded model) and decoders, over natural text and repeated random tokens."""
    root = tmp_path_factory.mktemp("decoder-heads")
    text = cut_conllu(EWT_SAMPLE, 12, root / "ewt12.conllu")
    gpt2 = tiny_gpt2(root / "gpt2")
    store = root / "store"
    plan = {
        "encoder text": (text, None, {}),
        "encoder repeated": (None, None, {"format": "repeated", "length": 6, "count": 3}),
        "induction repeated": (None, str(INDUCTION), {"format": "repeated", "length": 12, "count": 3}),
        "induction text": (text, str(INDUCTION), {}),  # every word is its <unk>: many duplicates
        "gpt2 text": (text, str(gpt2), {}),
    }
    ids = {name: atlas.ingest(c, m, store, dense=True, progress=False, **o).run_id for name, (c, m, o) in plan.items()}
    st = atlas.open(store)
    sources = dict(st.sql("SELECT run_id, model_source FROM runs").iter_rows())  # where each model was loaded from
    return {name: (st, run, sources[run]) for name, run in ids.items()}


@pytest.mark.parametrize(
    "name", ["encoder text", "encoder repeated", "induction repeated", "induction text", "gpt2 text"]
)
def test_entries_equal_the_released_definitions_on_dense_runs(runs, name):
    st, run, folder = runs[name]
    maps = eager_maps(st, run, folder)
    for entry in PATTERNS:
        frame = st.query(entry, run=run)
        assert frame["score"].to_list() == sorted(frame["score"].to_list(), reverse=True), entry
        np.testing.assert_allclose(grid(frame), detect(maps, entry), rtol=1e-5, atol=1e-6, err_msg=entry)
        assert set(frame["n_inputs"]) == {len(maps)}
    frame = st.query("head confidence", run=run)
    np.testing.assert_allclose(grid(frame), confidence(maps, specials(folder)), rtol=1e-5, atol=1e-6)


def test_the_references_tell_the_patterns_apart(runs):
    """On repeated tokens each pattern's scores differ from the others' (a test of one would not pass the other)."""
    st, run, folder = runs["induction repeated"]
    maps = eager_maps(st, run, folder)
    scores = [detect(maps, name) for name in PATTERNS]
    assert all(np.abs(a - b).max() > 0.05 for i, a in enumerate(scores) for b in scores[i + 1 :])
    ids = maps[0][1]
    n = 12
    assert induction_pattern(ids)[1 + n + 3].nonzero()[0].tolist() == [1 + 3 + 1]  # the token after the first copy
    assert duplicate_pattern(ids)[1 + n + 3].nonzero()[0].tolist() == [1 + 3]


def test_ceiling_is_the_score_of_the_pattern_itself(runs):
    st, run, _ = runs["induction repeated"]
    for entry in ("duplicate-token heads", "induction heads"):
        frame = st.query(entry, run=run)
        rows = [DETECTION[entry](np.array(ids)).any(axis=1).mean() for ids in per_input(st, run, "piece_id")]
        assert frame["ceiling"].to_list() == pytest.approx([np.mean(rows)] * len(frame))


# the repeated-token corpus


def test_draw_repeats_ids_of_the_vocabulary_without_its_special_tokens():
    tok = AutoTokenizer.from_pretrained(INDUCTION)
    ids = draw(Repeated(7, 4, 3), tok)
    assert ids.shape == (4, 14) and (ids[:, :7] == ids[:, 7:]).all()
    allowed = set(vocabulary(tok).tolist())
    assert allowed == set(range(256)) and set(ids.ravel().tolist()) <= allowed  # t0 .. t255, not <bos> or <unk>
    assert (draw(Repeated(7, 4, 3), tok) == ids).all() and not (draw(Repeated(7, 4, 4), tok) == ids).all()
    assert Repeated.parse(Repeated(7, 4, 3).name) == Repeated(7, 4, 3)


def test_repeated_run_lays_each_sequence_out_in_the_template(runs):
    st, run, _ = runs["induction repeated"]  # the tokenizer puts <bos> first
    row = st.sql(f"SELECT corpus, n_examples, n_tokens FROM runs WHERE run_id = '{run}'").row(0)
    assert row == ("repeated(N=12,K=3,seed=0)", 3, 3 * 25) and run.startswith("repeated-N12-K3-seed0__induction-2l__")
    tokens = st.sql(f"SELECT * FROM tokens WHERE run_id = '{run}' ORDER BY example_id, tok_idx")
    first = tokens.filter(pl.col("example_id") == 0)
    assert first["piece"][0] == "<bos>" and first["role"][0] == "bos" and first["special"].null_count() == 24
    assert first["piece_id"][1:13].to_list() == first["piece_id"][13:].to_list()
    assert first["piece"][1:].to_list() == [f"t{i}" for i in first["piece_id"][1:].to_list()]
    words = st.sql(f"SELECT form, first_tok, n_toks FROM words WHERE run_id = '{run}' AND example_id = 0")
    assert words["n_toks"].to_list() == [1] * 24 and words["first_tok"].to_list() == list(range(1, 25))
    st, run, _ = runs["encoder repeated"]  # [CLS] x x [SEP]
    assert all(s == ["[CLS]", *[None] * 12, "[SEP]"] for s in per_input(st, run, "special"))


def test_entries_of_annotations_a_repeated_run_lacks_refuse_it(runs):
    """Its words have no dependency relations: Clark et al.'s Table 1 refuses the run, not rows of NaN."""
    st, run, _ = runs["induction repeated"]
    with pytest.raises(AtlasError, match=f"run {run} has no dependency relations: ingest a corpus that has them"):
        st.query("best head per dependency relation", run=run)
    st, run, _ = runs["induction text"]
    assert len(st.query("best head per dependency relation", run=run, min_count=0)) > 2


def test_a_repeated_run_is_found_again_without_loading_the_model(runs, monkeypatch):
    st, run, _ = runs["encoder repeated"]  # (a GPT-2's longest input is known only once it is loaded)
    monkeypatch.setattr("atlas.model.load.load_model", lambda *a, **k: pytest.fail("the model was loaded"))
    again = atlas.ingest(None, None, st.store.root, format="repeated", length=6, count=3, dense=True)
    assert again.already_present and again.run_id == run


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"corpus": "x.conllu", "format": "repeated"}, "corpus: format='repeated' draws its tokens"),
        ({"corpus": None}, "corpus: name the corpus file"),
        ({"corpus": EWT_SAMPLE, "length": 5}, "length: sets the sequences of format='repeated'"),
        ({"corpus": None, "format": "repeated", "count": 0}, "count=0: expected 1 to 2,147,483,647"),
        ({"corpus": None, "format": "repeated", "pack": "pair"}, "pack: each repeated-token sequence is one input"),
        ({"corpus": None, "format": "repeated", "seed": 1}, "drawn with sample_seed"),
        ({"corpus": None, "format": "repeated", "sample": 3}, "sample: only a format='text' corpus is sampled"),
        ({"corpus": None, "format": "repeated", "length": 64}, "length=64: 2 x 64 tokens and the template's 1"),
        ({"corpus": None, "format": "repeated", "length": 64}, "induction-2l's longest input, 128 pieces"),
        ({"corpus": None, "format": "repeated", "max_length": 20}, "length=50: 2 x 50 tokens and the template's"),
        ({"corpus": None, "format": "repeated", "max_length": 20}, "special token(s) exceed max_length=20"),
    ],
)
def test_repeated_options_are_checked(tmp_path, options, message):
    corpus = options.pop("corpus")
    with pytest.raises(AtlasError) as error:
        atlas.ingest(corpus, str(INDUCTION), tmp_path / "store", progress=False, **options)
    assert message in str(error.value)


def test_too_long_repeated_tokens_are_refused_before_the_progress_bar(tmp_path):
    args = ["ingest", "--format", "repeated", "--length", "64", "--model", str(INDUCTION)]
    refused = CliRunner().invoke(cli, [*args, "--store", str(tmp_path / "s")])
    assert refused.exit_code == 1 and refused.output.count("\n") == 1, refused.output  # no bar, no store
    assert refused.output.endswith(f"exceed {INDUCTION}'s longest input, 128 pieces\n")
    assert "--max-length" not in refused.output
    assert not (tmp_path / "s").exists()


def test_the_command_line_ingests_repeated_tokens(tmp_path):
    args = ["ingest", "--format", "repeated", "--length", "5", "--count", "2", "--sample-seed", "1"]
    result = CliRunner().invoke(cli, [*args, "--model", str(INDUCTION), "--store", str(tmp_path), "--quiet"])
    assert result.exit_code == 0, result.output
    assert "repeated-N5-K2-seed1__induction-2l__" in result.output and "2 inputs" in result.output
    refused = CliRunner().invoke(cli, ["ingest", "--format", "repeated", "--corpus", "x", "--store", str(tmp_path)])
    assert refused.exit_code == 1 and "--corpus: --format 'repeated' draws its tokens" in refused.output


# the sample decoder's known heads


@pytest.fixture(scope="module")
def sample_runs(tmp_path_factory) -> tuple[atlas.Atlas, str, str, str]:
    """The sample decoder and its random init over the default repeated tokens (sparse, as ingested by default)."""
    store = tmp_path_factory.mktemp("induction")
    trained = atlas.ingest(model=str(INDUCTION), store=store, format="repeated", progress=False).run_id  # no corpus
    random = atlas.ingest(None, str(INDUCTION), store, format="repeated", random_init=True, progress=False).run_id
    dense = atlas.ingest(None, str(INDUCTION), store, format="repeated", dense=True, progress=False).run_id
    return atlas.open(store), trained, random, dense


@pytest.mark.filterwarnings("ignore::atlas.api.AtlasNote")
def test_the_sample_decoder_has_an_induction_head_reading_a_previous_token_head(sample_runs):
    st, trained, random, _ = sample_runs
    induction = st.query("induction heads", run=trained)
    top = induction.row(0, named=True)
    assert top["layer"] == 2
    layer_one = induction.filter(pl.col("layer") == 1)["score"].max()
    assert top["score"] >= 3 * layer_one
    assert top["score"] >= 3 * st.query("induction heads", run=random)["score"].max()
    assert st.query("previous-token heads", run=trained).row(0, named=True)["layer"] == 1


@pytest.mark.filterwarnings("ignore::atlas.api.AtlasNote")
def test_sparse_scores_are_lower_bounds_and_confidence_is_exact(sample_runs):
    st, sparse, _, dense = sample_runs
    with pytest.warns(atlas.api.AtlasNote, match="sparse: the scores count its kept edges only"):
        got = grid(st.query("induction heads", run=sparse))
    assert (got <= grid(st.query("induction heads", run=dense)) + 1e-3).all()
    duplicate = [grid(st.query("duplicate-token heads", run=r)) for r in (sparse, dense)]
    assert (duplicate[0] <= duplicate[1] + 1e-3).all()
    for entry, tolerance in (("head confidence", 1 / 512), ("previous-token heads", 1 / 4096)):
        np.testing.assert_allclose(grid(st.query(entry, run=sparse)), grid(st.query(entry, run=dense)), atol=tolerance)


@pytest.mark.filterwarnings("ignore::atlas.api.AtlasNote")
def test_runs_compare_and_the_figure_is_the_heads_heatmap(sample_runs):
    st, trained, random, _ = sample_runs
    compared = st.query("induction heads", runs=[trained, random])
    assert {f"score@{trained}", f"score@{random}", f"score_diff@{random}"} <= set(compared.columns)
    frame = st.query("induction heads", run=trained)
    fig = figure(resolve("induction heads"), frame)
    (image,) = [image for ax in fig.axes for image in ax.get_images()]
    np.testing.assert_allclose(np.asarray(image.get_array()), grid(frame))


def test_the_bos_row_of_a_decoder_is_said_to_be_no_heads_doing(sample_runs, dense_store):
    """A decoder's BOS row sees only itself: its entropy and [CLS]-by-feature answers are the same in every head,
    and a note says so; an encoder's [CLS] row gets no such note."""
    st, _, _, dense = sample_runs
    said = f"note: run {dense} is a decoder's: its BOS row attends only to itself, the same in every head, not"
    for entry, column in (("entropy", "cls_entropy"), ("cls attention by feature", "cls")):
        answer = st.answer(entry, run=dense)
        assert any(note.startswith(said) for note in answer.notes), answer.notes
        assert answer.frame[column].n_unique() == 1  # the same in every head
    store, run = dense_store
    with atlas.open(store.root) as encoder:
        for entry in ("entropy", "cls attention by feature"):
            assert not any("BOS row" in note for note in encoder.answer(entry, run=run).notes)
