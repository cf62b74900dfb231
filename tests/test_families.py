"""Every model family the atlas takes (a row of ``atlas.model.families.FAMILIES``): a tiny random model of each
(2 layers, 4 heads, 2 key/value heads where the family groups them), built from its config with a tokenizer of its
kind (``tests/tokenizers_helpers.py``), saved with safetensors and loaded through ``load_model``. The attention
captured equals transformers' own eager attention (``attn_implementation="eager"``, ``output_attentions=True``) on a
padded batch, layer for layer; a decoder puts no weight on a future token; sliding windows, soft-capping and grouped
key/value heads are the model's own. Each tiny model then ingests a few sentences of the UD sample: every word
aligned, the stored maps equal the eager ones, and every catalogue entry that applies to a treebank run answers
(those that need another command first say so).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from itertools import islice
from pathlib import Path

import norm_reference
import numpy as np
import polars as pl
import pytest
import torch
from conftest import EWT_SAMPLE, cut_conllu, make_store
from tokenizers_helpers import TOKENIZERS, save, training_text
from transformers import AutoConfig, AutoModel, PreTrainedTokenizerFast

import atlas
from atlas.catalogue import entries
from atlas.errors import AtlasError
from atlas.model.capture import reads_rows, recording
from atlas.model.families import FAMILIES
from atlas.model.forward import attention
from atlas.model.identity import model_identity
from atlas.model.intervene import Intervention, intervening
from atlas.model.kinds import is_decoder
from atlas.model.load import LoadedModel, load_model

SIZE = {
    "hidden_size": 32,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "intermediate_size": 64,
    "initializer_range": 0.4,  # peaked attention, so that a wrong mask, scale or cap shows
}
WINDOW = 4  # sliding window of the families that have one (the inputs are longer)


@dataclass(frozen=True)
class Case:
    model_type: str
    tokenizer: str  # a key of TOKENIZERS: the family's kind of tokenizer
    config: dict[str, object] = field(default_factory=dict)
    decoder: bool = False
    windowed: bool = False  # a layer attends within a sliding window
    max_positions: int | None = None  # the longest input, where it is not config.max_position_embeddings


CASES = {
    "bert": Case("bert", "bert"),
    "roberta": Case("roberta", "roberta", {"max_position_embeddings": 130}, max_positions=128),
    "xlm-roberta": Case("xlm-roberta", "xlmr", {"max_position_embeddings": 130}, max_positions=128),
    "electra": Case("electra", "bert", {"embedding_size": 16}),
    "distilbert": Case("distilbert", "bert", {"dim": 32, "n_layers": 2, "n_heads": 4, "hidden_dim": 64}),
    "albert": Case("albert", "albert", {"embedding_size": 16}),
    "deberta-v2": Case(  # v3's settings: relative attention both ways, log buckets, shared keys, no token types
        "deberta-v2",
        "albert",
        {
            "relative_attention": True,
            "pos_att_type": ["p2c", "c2p"],
            "position_buckets": 8,
            "max_relative_positions": -1,
            "share_att_key": True,
            "norm_rel_ebd": "layer_norm",
            "type_vocab_size": 0,
        },
    ),
    "modernbert": Case(  # layer 0 global, layer 1 local (a window of 4 around each token)
        "modernbert", "bert", {"global_attn_every_n_layers": 2, "local_attention": WINDOW}, windowed=True
    ),
    "gpt2": Case("gpt2", "gpt2", {"n_embd": 32, "n_layer": 2, "n_head": 4, "n_positions": 128}, decoder=True),
    "gpt2-upcast": Case(  # GPT-2's other eager path: float32 scores scaled by 1 / (layer + 1) inside baddbmm
        "gpt2",
        "gpt2",
        {
            "n_embd": 32,
            "n_layer": 2,
            "n_head": 4,
            "reorder_and_upcast_attn": True,
            "scale_attn_by_inverse_layer_idx": True,
        },
        decoder=True,
    ),
    "llama": Case("llama", "llama3", {"num_key_value_heads": 2}, decoder=True),
    "mistral": Case("mistral", "llama2", {"num_key_value_heads": 2, "sliding_window": WINDOW}, True, True),
    "qwen2": Case(
        "qwen2",
        "gpt2",
        {"num_key_value_heads": 2, "use_sliding_window": True, "sliding_window": WINDOW, "max_window_layers": 1},
        True,
        True,
    ),
    "qwen3": Case(
        "qwen3",
        "gpt2",
        {
            "num_key_value_heads": 2,
            "head_dim": 8,
            "use_sliding_window": True,
            "sliding_window": WINDOW,
            "max_window_layers": 1,
        },
        True,
        True,
    ),  # fmt: skip
    "gemma": Case("gemma", "llama2", {"num_key_value_heads": 1, "head_dim": 8}, decoder=True),  # multi-query
    "gemma2": Case(  # sliding and global layers, logits soft-capped at 2, scaled by 16 ** -0.5 (not head_dim's)
        "gemma2",
        "llama2",
        {
            "num_key_value_heads": 2,
            "head_dim": 8,
            "sliding_window": WINDOW,
            "attn_logit_softcapping": 2.0,
            "query_pre_attn_scalar": 16,
        },
        True,
        True,
    ),  # fmt: skip
    "gemma3": Case(
        "gemma3_text",
        "llama2",
        {
            "num_key_value_heads": 2,
            "head_dim": 8,
            "sliding_window": WINDOW,
            "query_pre_attn_scalar": 16,
            "layer_types": ["sliding_attention", "full_attention"],
        },
        True,
        True,
    ),  # fmt: skip
    "phi": Case("phi", "gpt2", {"num_key_value_heads": 2, "partial_rotary_factor": 0.5}, decoder=True),
    "phi3": Case("phi3", "llama2", {"num_key_value_heads": 2, "sliding_window": WINDOW}, True, True),
}


def _config(family: Case, tok: PreTrainedTokenizerFast):
    ids = {
        "vocab_size": len(tok),
        "pad_token_id": tok.pad_token_id,
        "bos_token_id": tok.bos_token_id if tok.bos_token_id is not None else tok.cls_token_id,
        "eos_token_id": tok.eos_token_id if tok.eos_token_id is not None else tok.sep_token_id,
    }
    if family.model_type == "modernbert":
        ids |= {"cls_token_id": tok.cls_token_id, "sep_token_id": tok.sep_token_id}
    return AutoConfig.for_model(family.model_type, **SIZE, **ids, **family.config)


def build(family: Case, folder: Path) -> Path:
    """A tiny random model of the family with its tokenizer, saved (safetensors) where ``load_model`` reads it."""
    tok = TOKENIZERS[family.tokenizer]()
    torch.manual_seed(0)
    AutoModel.from_config(_config(family, tok)).save_pretrained(folder)
    return save(tok, folder)


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("families")
    return {name: build(f, root / name) for name, f in CASES.items()}


def texts(n: int = 2) -> list[str]:
    """Sample sentences of 12 to 25 words, shortest last, so that the batch is padded."""
    fit = (t for t in training_text() if 12 <= len(t.split()) <= 25)
    return sorted(islice(fit, n), key=len, reverse=True)


def padded(lm: LoadedModel, inputs: list[list[int]]) -> dict[str, torch.Tensor]:
    longest = max(len(ids) for ids in inputs)
    pad = lm.tokenizer.pad_token_id or 0
    input_ids = torch.tensor([ids + [pad] * (longest - len(ids)) for ids in inputs])
    mask = torch.tensor([[1] * len(ids) + [0] * (longest - len(ids)) for ids in inputs])
    return {"input_ids": input_ids, "attention_mask": mask}


def eager_model(folder: Path) -> torch.nn.Module:
    return AutoModel.from_pretrained(folder, attn_implementation="eager", dtype=torch.float32).eval()


def eager_maps(folder: Path, batch: dict[str, torch.Tensor]) -> list[np.ndarray]:
    """transformers' own eager attention ``[batch][layers, heads, n, n]`` of each input's real tokens."""
    model = eager_model(folder)
    with torch.inference_mode():
        out = model(**batch, output_attentions=True)
    stacked = torch.stack(out.attentions, dim=1).numpy()
    return [stacked[row, :, :, :n, :n] for row, n in enumerate(batch["attention_mask"].sum(dim=1).tolist())]


def test_every_family_is_covered():
    assert sorted({case.model_type for case in CASES.values()}) == sorted(FAMILIES)
    assert all(key == row.model_type for key, row in FAMILIES.items())


@pytest.mark.parametrize("name", list(CASES))
def test_captured_attention_equals_eager_attention(built, name):
    family = CASES[name]
    lm = load_model(str(built[name]))
    config = lm.model.config
    assert (lm.n_layers, lm.n_heads, lm.decoder) == (2, 4, family.decoder)
    assert lm.max_positions == (family.max_positions or config.max_position_embeddings)
    told = model_identity(str(built[name])).max_positions  # told without loading: only where the table says so
    assert told == (lm.max_positions if FAMILIES[family.model_type].plain_positions else None)
    assert reads_rows(lm.model) == (family.model_type != "deberta-v2")  # its own module computes its attention
    inputs = [lm.tokenizer(t)["input_ids"] for t in texts()]
    assert len(inputs[0]) > len(inputs[1]) > 2 * WINDOW
    captured = attention(lm, [(ids, [0] * len(ids)) for ids in inputs])
    batch = padded(lm, inputs)
    eager = eager_maps(built[name], batch)
    for ids, got, want in zip(inputs, captured, eager, strict=True):
        n = len(ids)
        assert got.shape == want.shape == (2, 4, n, n)  # every layer and head
        assert np.abs(got - want).max() <= 1e-6
        np.testing.assert_allclose(got.sum(axis=-1), 1.0, atol=1e-5)
        if family.decoder:
            assert not np.triu(got, k=1).any()  # no weight on a future token
            assert np.triu(want, k=1).sum() == 0
        if family.windowed:  # a layer gives nothing to the tokens more than a window away
            far = np.abs(np.subtract.outer(np.arange(n), np.arange(n))) > WINDOW
            assert any((layer[:, far] == 0).all() for layer in got)
    alone = eager_maps(built[name], padded(lm, inputs[1:]))[0]  # the padded input run alone
    assert np.abs(captured[1] - alone).max() <= 1e-5


def test_a_decoder_never_looks_ahead(built):
    """``attention`` refuses maps with weight on a future token when the model is a decoder."""
    lm = load_model(str(built["bert"]))
    lm.decoder = True  # a bidirectional model taken for a decoder
    ids = lm.tokenizer(texts(1)[0])["input_ids"]
    with pytest.raises(AtlasError, match="future token"):
        attention(lm, [(ids, [0] * len(ids))])


@pytest.mark.parametrize(
    ("model_type", "architecture"), [("mpnet", "MPNetModel"), ("gpt_neox", "GPTNeoXForCausalLM"), ("t5", None)]
)
def test_an_unsupported_architecture_is_refused_in_one_line(tmp_path, model_type, architecture):
    AutoConfig.for_model(model_type, architectures=[architecture] if architecture else None).save_pretrained(tmp_path)
    with pytest.raises(AtlasError) as err:
        load_model(str(tmp_path))
    message = str(err.value)
    assert "\n" not in message
    assert f"architecture {architecture or model_type} (model_type {model_type}) is not supported" in message


def test_a_decoder_is_one_of_a_decoder_family_or_a_config_marked_so():
    assert is_decoder(AutoConfig.for_model("llama")) and not is_decoder(AutoConfig.for_model("bert"))
    assert is_decoder(AutoConfig.for_model("bert", is_decoder=True))  # BERT as a causal language model


def test_the_kind_of_an_unsupported_architecture_is_refused_as_its_loading_is():
    """A decoder family the capture does not read (GPT-NeoX) is not taken for an encoder: its kind is refused."""
    config = AutoConfig.for_model("gpt_neox", architectures=["GPTNeoXForCausalLM"])
    with pytest.raises(AtlasError, match=r"architecture GPTNeoXForCausalLM \(model_type gpt_neox\) is not supported"):
        is_decoder(config)


@pytest.mark.parametrize("name", ["distilbert", "deberta-v2", "llama", "gemma2"])
def test_uniform_heads_and_kept_attention(built, name):
    """Kovaleva et al.'s uniform head is 1/L over the tokens it may see (its real tokens; in a decoder those up to
    itself, within its window); the layer below and the other heads are untouched; kept maps carry gradients."""
    lm = load_model(str(built[name]))
    batch = padded(lm, [lm.tokenizer(t)["input_ids"] for t in texts()])
    with torch.inference_mode(), recording() as base:
        lm.model(**batch)
    with torch.inference_mode(), intervening(Intervention(uniform={1: [0, 2]})), recording() as changed:
        lm.model(**batch)
    assert torch.equal(changed[0], base[0])
    assert torch.equal(changed[1][:, [1, 3]], base[1][:, [1, 3]])
    for row, n in enumerate(batch["attention_mask"].sum(dim=1).tolist()):
        for head in (0, 2):
            probs = changed[1][row, head, :n]
            seen = base[1][row, head, :n] > 0  # the tokens this head can see
            want = seen.double() / seen.sum(dim=-1, keepdim=True)
            assert torch.allclose(probs.double(), want, atol=1e-7)
            assert torch.all(changed[1][row, head, :n, n:] == 0)
    with intervening(Intervention(keep=True)) as seen:
        lm.model(**batch).last_hidden_state.sum().backward()
    assert len(seen.kept) == lm.n_layers
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in seen.kept)


def test_deberta_gates_scale_each_heads_output(built):
    """DeBERTa-v2's heads are gated on their probabilities, which scales each head's output by its gate (Michel
    et al.'s xi_h), per layer and head or per example, layer, head and token."""
    lm = load_model(str(built["deberta-v2"]))
    batch = padded(lm, [lm.tokenizer(t)["input_ids"] for t in texts()])
    self_attention = lm.model.encoder.layer[0].attention.self
    outputs: list[torch.Tensor] = []
    hook = self_attention.register_forward_hook(lambda _m, _a, out: outputs.append(out[0]))
    size, length = batch["input_ids"].shape
    per_head = torch.tensor([[0.0, 0.5, 1.0, 2.0], [1.0, 1.0, 1.0, 1.0]])
    per_token = torch.rand(size, 2, 4, length, generator=torch.Generator().manual_seed(0))
    try:
        with torch.inference_mode():
            lm.model(**batch)
            for gates in (per_head, per_token):
                with intervening(Intervention(gates=gates)):
                    lm.model(**batch)
    finally:
        hook.remove()
    plain = outputs[0].view(size, length, 4, -1)
    by_head = per_head[0][None, None, :, None]
    by_token = per_token[:, 0].transpose(1, 2)[..., None]  # [batch, q, heads, 1]
    torch.testing.assert_close(outputs[1].view(size, length, 4, -1), plain * by_head, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(outputs[2].view(size, length, 4, -1), plain * by_token, rtol=1e-5, atol=1e-6)


def test_albert_heads_cannot_be_intervened_on_per_layer(built):
    """ALBERT runs one shared attention module in every layer: a per-layer intervention is refused."""
    lm = load_model(str(built["albert"]))
    batch = padded(lm, [lm.tokenizer(texts(1)[0])["input_ids"]])
    with torch.inference_mode(), intervening(Intervention(uniform={1: [0]})), pytest.raises(AtlasError, match="ALBERT"):
        lm.model(**batch)


def _same_norms_and_rollout(sql, ex: int, model: torch.nn.Module, ids: list[int], want: np.ndarray) -> None:
    """Input ``ex``'s value norms: every one positive, and those of a family whose value vectors ``norm_reference``
    finds (all but ALBERT's shared layers, ModernBERT's and Phi-3's fused projections) equal to its computation, the
    released one, within 1e-5 relative; its rollout
    (every row, dense) equal to the released recurrence's over the eager maps ``want`` within 1e-6."""
    layers, heads, n, _ = want.shape
    rows = sql(f"SELECT layer, head, src_tok, value_norm FROM attn_rows WHERE example_id = {ex}").fetchnumpy()
    norms = np.zeros((layers, heads, n))
    norms[rows["layer"], rows["head"], rows["src_tok"]] = rows["value_norm"]
    assert (norms > 0).all() and np.isfinite(norms).all()
    if model.config.model_type in norm_reference.FAMILIES:
        reference = norm_reference.value_norms(model, torch.tensor([ids]))
        np.testing.assert_allclose(norms, reference, rtol=1e-5)
    got = np.zeros((layers, n, n))
    roll = sql(f"SELECT layer, src_tok, dst_tok, weight FROM rollout WHERE example_id = {ex}").fetchnumpy()
    got[roll["layer"], roll["src_tok"], roll["dst_tok"]] = roll["weight"]
    np.testing.assert_allclose(got, norm_reference.rollout(want), atol=1e-6)


# entries that answer only once another command has run, or that compare two runs: they refuse in one line
NEEDS_MORE = {
    "ablation summary", "coreference heads", "fine-tuning change", "frame heads", "glue baselines",
    "gradient importance", "head ablation", "head distances", "head importance", "layer ablation", "pattern shares",
    "probe results", "probe weights", "pruning curve", "retrieval heads",
}  # fmt: skip
PARAMS = {"best head per dependency relation": {"min_count": 1}}  # a handful of sentences


@pytest.fixture(scope="module")
def ud_sample(tmp_path_factory) -> Path:
    return cut_conllu(EWT_SAMPLE, 4, tmp_path_factory.mktemp("ud") / "ewt-4.conllu")


@pytest.mark.parametrize("name", list(CASES))
def test_the_ud_sample_is_ingested_and_the_catalogue_answers(built, ud_sample, tmp_path, name):
    lm = load_model(str(built[name]))
    make_store(tmp_path, ud_sample, lm, kept_mass=None, norms=True, rollout="all")  # dense: every weight stored
    st = atlas.open(tmp_path)
    sql = st.connection.sql
    assert sql("SELECT count(*), sum(n_skipped), sum(n_sentences) FROM runs").fetchone() == (1, 0, 4)
    words = sql("SELECT example_id, word_idx, form, first_tok, n_toks FROM words ORDER BY ALL").fetchall()
    assert len(words) == sum(
        1 for line in ud_sample.read_text().splitlines() if line.split("\t")[0].isdigit()
    )  # every syntactic word of the corpus
    tokens = sql("SELECT example_id, tok_idx, piece_id, word_idx FROM tokens ORDER BY ALL").fetchall()
    owner = {(ex, tok): word for ex, tok, _, word in tokens}
    for ex, word, form, first, n in words:  # every word owns its pieces, which spell it out
        assert n >= 1 and all(owner[ex, t] == word for t in range(first, first + n))
        ids = [piece for e, t, piece, _ in tokens if e == ex and first <= t < first + n]
        spelt = lm.tokenizer.decode(ids).replace(" ", "")
        assert spelt.lower() == form.replace(" ", "").lower()
    assert sum(word is not None for *_, word in tokens) == sum(n for *_, n in words)

    model = eager_model(built[name])
    sink, relative = [], []
    for ex in range(4):
        ids = [piece for e, _, piece, _ in tokens if e == ex]
        with torch.inference_mode():
            want = torch.cat(model(input_ids=torch.tensor([ids]), output_attentions=True).attentions).numpy()
        n = len(ids)
        stored = np.zeros_like(want)
        edges = sql(
            f"SELECT layer, head, src_tok, dst_tok, weight FROM attn_edges WHERE example_id = {ex}"
        ).fetchnumpy()
        stored[edges["layer"], edges["head"], edges["src_tok"], edges["dst_tok"]] = edges["weight"]
        assert np.abs(stored - want).max() <= 1e-5  # the eager maps (run alone, not in the ingest batch)
        if CASES[name].decoder:  # no edge to a future token, not even one of weight 0: the lower triangle
            assert not (edges["dst_tok"] > edges["src_tok"]).any()
            assert len(edges["weight"]) == want.shape[0] * want.shape[1] * n * (n + 1) // 2
        else:  # dense: every weight
            assert len(edges["weight"]) == want.size
        _same_norms_and_rollout(sql, ex, model, ids, want)
        sink.append(want[:, :, :, 0].mean(axis=-1))  # Xiao et al.: attention to the first token, mean over rows
        rows = np.arange(n)
        prev = np.where(rows > 0, want[:, :, rows, np.maximum(rows - 1, 0)], 0).mean(axis=-1)
        nxt = np.where(rows < n - 1, want[:, :, rows, np.minimum(rows + 1, n - 1)], 0).mean(axis=-1)
        relative.append(np.stack([prev, nxt, want[:, :, rows, rows].mean(axis=-1)], axis=-1))

    shares = sql("SELECT sum(mass::DOUBLE) AS s FROM attn_distance GROUP BY example_id, layer, head").fetchnumpy()["s"]
    assert len(shares) == 4 * want.shape[0] * want.shape[1]
    np.testing.assert_allclose(shares, 1.0, rtol=1e-6)  # the distance profile: each input's rows' shares
    answer = st.query("attention sink").filter(pl.col("head").is_not_null()).sort("layer", "head")
    np.testing.assert_allclose(answer["first"].to_numpy(), np.mean(sink, axis=0).ravel(), atol=1e-6)
    answer = st.query("relative position").sort("layer", "head")
    got = answer.select("prev", "next", "self").to_numpy()
    np.testing.assert_allclose(got, np.mean(relative, axis=0).reshape(-1, 3), atol=1e-6)

    for entry in entries():
        if entry.name in NEEDS_MORE:
            with pytest.raises(AtlasError):
                st.answer(entry.name)
            continue
        answer = st.answer(entry.name, **PARAMS.get(entry.name, {}))
        frame = answer.frame
        if frame.is_empty():  # only with a note saying why (GPT-2's inputs have no [CLS] row)
            assert answer.notes, entry.name
            continue
        values = [c for c in frame.columns if c not in ("layer", "head")]
        assert any(frame[c].null_count() < frame.height for c in values), entry.name
