"""Independent reference computations for the norm-based analysis (Kobayashi et al., EMNLP 2020) and attention
rollout (Abnar & Zuidema, ACL 2020), written from the authors' released code, not from the project's ``atlas``.

Released code followed (bare mirrors read at their HEAD):

* ``gorokoba560/norm-analysis-of-transformer``:
  ``emnlp2020/transformers/src/transformers/modeling_bert.py`` (``BertNormOutput``, ``||f(x)||`` and ``||αf(x)||``),
  ``emnlp2020/exp1_bert/re-examine.py`` (attention to [CLS], [SEP], "," / "." and other tokens),
  ``emnlp2020/exp1_bert/relation_between_alpha_fx.py`` (the pooled (α, ||f(x)||) pairs),
  ``emnlp2020/exp1_bert/data_extract.py`` (inputs: [CLS]/[SEP] already in the tokens, padded to 128 with [PAD]).
* ``samiraabnar/attention_flow``: ``attention_graph_util.py`` (``compute_joint_attention``) and
  ``compute_corel_distilbert_sst.py`` (``get_joint_relevance``: the head mean taken before it).

Everything is float64 numpy; nothing here imports the project.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
from scipy.stats import spearmanr

# ---------------------------------------------------------------------------------------------------------------
# ||f(x)||: the norm of each head's transformed value vectors
# ---------------------------------------------------------------------------------------------------------------


# the families the value vectors are found in here (by their modules' names)
FAMILIES = (
    "bert", "roberta", "xlm-roberta", "electra", "gpt2", "llama", "mistral", "qwen2", "qwen3", "gemma", "gemma2",
    "gemma3_text", "phi", "distilbert", "deberta-v2",
)  # fmt: skip


def _attention_parts(model) -> tuple[str, list[tuple[torch.nn.Module, torch.Tensor]], int, int, int]:
    """(family, [(value module, W_O as [hidden_out, heads*head_dim])] per layer, heads, kv heads, head_dim)."""
    config = model.config
    family = config.model_type
    base = model.base_model
    if family in ("bert", "roberta", "xlm-roberta", "electra"):  # BERT's layout
        heads = config.num_attention_heads
        parts = [(lay.attention.self.value, lay.attention.output.dense.weight) for lay in base.encoder.layer]
        return family, parts, heads, heads, config.hidden_size // heads
    if family in ("llama", "mistral", "qwen2", "qwen3", "gemma", "gemma2", "gemma3_text", "phi"):
        heads = config.num_attention_heads
        kv = getattr(config, "num_key_value_heads", None) or heads
        d = getattr(config, "head_dim", None) or config.hidden_size // heads
        out = "dense" if family == "phi" else "o_proj"  # Phi names its output projection dense
        parts = [(lay.self_attn.v_proj, getattr(lay.self_attn, out).weight) for lay in base.layers]
        return family, parts, heads, kv, d
    if family == "distilbert":
        heads = config.n_heads
        parts = [(lay.attention.v_lin, lay.attention.out_lin.weight) for lay in base.transformer.layer]
        return family, parts, heads, heads, config.dim // heads
    if family == "deberta-v2":
        heads = config.num_attention_heads
        selfs = [lay.attention for lay in base.encoder.layer]
        parts = [(a.self.value_proj, a.output.dense.weight) for a in selfs]
        return family, parts, heads, heads, selfs[0].self.attention_head_size
    if family == "gpt2":
        heads = config.n_head
        # Conv1D keeps its weight as [in, out] (y = x @ W + b): the Linear-style W_O is c_proj.weight.T
        parts = [(blk.attn.c_attn, blk.attn.c_proj.weight.T) for blk in base.h]
        return family, parts, heads, heads, config.n_embd // heads
    raise ValueError(f"no reference for model family {family!r}")


def transformed_vectors(model, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None) -> list[np.ndarray]:
    """f_h(x_j) for ONE input: per layer an array [heads, n, hidden] (float64).

    Follows ``BertNormOutput.forward`` in ``emnlp2020/transformers/src/transformers/modeling_bert.py``: the value
    layer *with* its bias (``self.value(hidden_states)``, an ``nn.Linear``) split per head, times that head's slice of
    the attention output dense weight, *without* the output bias::

        dense = dense.weight.view(all_head_size, num_heads, head_size).permute(1, 2, 0)  # [H, d, hidden]
        transformed_layer = value_layer.matmul(dense)                                    # v_h @ W_O[:, h*d:(h+1)*d].T

    The value vectors are taken with a forward hook on the value projection (its output includes its bias) and the
    product is done directly in float64. Llama's grouped-query attention: query head h reads KV head
    h // (H / H_kv), the order of transformers' ``repeat_kv``. GPT-2: the value third of ``c_attn``'s output,
    ``c_proj`` (Conv1D, weight [in, out]) as the output projection.
    """
    family, parts, heads, kv_heads, d = _attention_parts(model)
    ids = input_ids if input_ids.dim() == 2 else input_ids.unsqueeze(0)
    if ids.shape[0] != 1:
        raise ValueError("one input (a batch of 1) at a time")
    mask = None if attention_mask is None else (attention_mask if attention_mask.dim() == 2 else attention_mask[None])
    captured: list[torch.Tensor | None] = [None] * len(parts)
    hooks = []
    for i, (module, _) in enumerate(parts):

        def hook(_module, _args, output, i=i):
            captured[i] = output.detach()

        hooks.append(module.register_forward_hook(hook))
    try:
        with torch.no_grad():
            model(input_ids=ids, attention_mask=mask)
    finally:
        for h in hooks:
            h.remove()
    group = heads // kv_heads
    out = []
    for (_, w_o), value in zip(parts, captured, strict=True):
        v = value[0].to(torch.float64)  # [n, out of the value projection]
        if family == "gpt2":
            v = v[:, 2 * heads * d : 3 * heads * d]  # q, k, v = c_attn(x).split(hidden)
        n = v.shape[0]
        v = v.reshape(n, kv_heads, d)
        w = w_o.detach().to(torch.float64)  # [hidden, heads*d]
        f = torch.stack([v[:, h // group, :] @ w[:, h * d : (h + 1) * d].T for h in range(heads)])  # [H, n, hidden]
        out.append(f.numpy())
    return out


def value_norms(model, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None) -> np.ndarray:
    """||f_h(x_j)|| for ONE input: [layers, heads, n] float64 (padding positions, if any, are included).

    ``transformed_norm = torch.norm(transformed_layer, dim=-1)`` in ``BertNormOutput`` (``modeling_bert.py`` of
    ``emnlp2020/transformers``); the vectors as in ``transformed_vectors``. ||αf(x)|| there is
    ``torch.norm(einsum('bhks,bhsd->bhksd', attention_probs, transformed_layer))`` = α_ij ||f(x_j)|| (α >= 0).
    """
    return np.stack([np.linalg.norm(f, axis=-1) for f in transformed_vectors(model, input_ids, attention_mask)])


def attention_maps(model, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None) -> np.ndarray:
    """transformers' own attention probabilities for ONE input, [layers, heads, n, n] float64 (rows = queries).
    Load the model with ``attn_implementation="eager"`` so that they are returned."""
    ids = input_ids if input_ids.dim() == 2 else input_ids.unsqueeze(0)
    mask = None if attention_mask is None else (attention_mask if attention_mask.dim() == 2 else attention_mask[None])
    with torch.no_grad():
        out = model(input_ids=ids, attention_mask=mask, output_attentions=True)
    return np.stack([a[0].to(torch.float64).numpy() for a in out.attentions])


# ---------------------------------------------------------------------------------------------------------------
# Re-examining attention to special tokens (Section 4.1 of the paper): re-examine.py
# ---------------------------------------------------------------------------------------------------------------

CLASSES = ("cls", "sep", "dot_comma", "other")


def token_classes(
    tokens: Sequence[str], cls: str = "[CLS]", sep: str = "[SEP]", pad: str = "[PAD]"
) -> dict[str, np.ndarray]:
    """The four token classes of ``re-examine.py``, as boolean masks over the tokens::

        ids[ids==cls_id] = -1; ids[ids==sep_id] = -2; ids[ids==comma_id] = -3; ids[ids==period_id] = -3
        ids[ids>0] = -4

    i.e. [CLS]; [SEP]; exactly "," and "." (no other punctuation); every other token except padding ([PAD] is id 0,
    not > 0, so it is in no class; [UNK], [MASK], "!", "?", ";" ... are "other").
    """
    t = np.asarray(tokens, dtype=object)
    c, s = t == cls, t == sep
    dc = ((t == ",") | (t == ".")) & ~c & ~s
    other = ~(c | s | dc | (t == pad))
    return {"cls": c, "sep": s, "dot_comma": dc, "other": other}


def reexamine(
    attn: np.ndarray, norms: np.ndarray, classes: dict[str, np.ndarray], length: int | None = None
) -> dict[str, dict[str, np.ndarray]]:
    """One input: per class, three [layers, heads] arrays, as ``emnlp2020/exp1_bert/re-examine.py`` computes them::

        cls_attn = torch.mean(attentions[l][0,h,:seq_len[i],ids[0]==-1].sum(1))
        cls_fx   = torch.mean(norms[l][0][0,h,ids[0]==-1].mean(-1))
        cls_afx  = torch.mean(norms[l][1][0,h,0:seq_len[i],ids[0]==-1].sum(1))

    ``attn`` [L,H,n,n] (rows = queries), ``norms`` [L,H,n] (||f(x_j)||), ``classes`` name -> boolean mask over the n
    key positions. Query rows are ``0:length`` (``seq_len``: every real token, [CLS] and [SEP] included, padding
    excluded; default all n rows).

    * ``weight``: α summed over the class's key positions, then the mean over the query rows;
    * ``norm``: ||α_ij f(x_j)|| = α_ij ||f(x_j)|| summed over the class's key positions, mean over the query rows;
    * ``fnorm``: the mean of ||f(x_j)|| over the class's positions (not weighted by queries).

    An empty class (e.g. an input without "," or "."): the sums are over nothing, so ``weight`` and ``norm`` are 0,
    while ``fnorm`` is the mean of an empty tensor, NaN -- as in the released code.
    """
    rows = attn.shape[-2] if length is None else length
    a = np.asarray(attn, dtype=np.float64)[:, :, :rows, :]
    f = np.asarray(norms, dtype=np.float64)
    out = {}
    for name, mask in classes.items():
        m = np.asarray(mask, dtype=bool)
        a_c = a[..., m]  # [L, H, rows, |c|]
        f_c = f[..., m]  # [L, H, |c|]
        weight = a_c.sum(-1).mean(-1)
        norm = (a_c * f_c[:, :, None, :]).sum(-1).mean(-1)
        fnorm = f_c.mean(-1) if m.any() else np.full(f.shape[:2], np.nan)
        out[name] = {"weight": weight, "norm": norm, "fnorm": fnorm}
    return out


def reexamine_corpus(per_input: Sequence[dict[str, dict[str, np.ndarray]]]) -> dict[str, dict[str, np.ndarray]]:
    """Average ``reexamine`` results over inputs, per class and per (layer, head), as ``convert_head_avg`` in
    ``re-examine.py`` does: ``sum(a_lis[l][h]) / len(a_lis[l][h])`` over the per-input floats -- a plain mean, no
    ``nanmean``: a class that is empty in *any* input gives ``fnorm`` NaN for every head (its ``weight`` and ``norm``
    count that input as 0 and stay finite). Returns [layers, heads] arrays; ``layer_average`` gives the per-layer
    figures."""
    names = per_input[0].keys()
    return {
        c: {k: np.mean(np.stack([r[c][k] for r in per_input]), axis=0) for k in ("weight", "norm", "fnorm")}
        for c in names
    }


def layer_average(result: dict[str, dict[str, np.ndarray]]) -> dict[str, dict[str, np.ndarray]]:
    """``convert_layer_avg`` of ``re-examine.py``: per layer, the plain mean over heads of the per-head (already
    input-averaged) values, [layers]; NaN propagates."""
    return {c: {k: v.mean(axis=1) for k, v in d.items()} for c, d in result.items()}


# ---------------------------------------------------------------------------------------------------------------
# Relation between α and ||f(x)|| (Section 4.2 of the paper): relation_between_alpha_fx.py
# ---------------------------------------------------------------------------------------------------------------


def spearman_pairs(
    attns: np.ndarray | Sequence[np.ndarray],
    norms: np.ndarray | Sequence[np.ndarray],
    lengths: Sequence[int | None] | None = None,
    keys: Sequence[np.ndarray | None] | None = None,
    causal: bool = False,
) -> list[tuple[np.ndarray, np.ndarray]]:
    """Per layer, the pooled (α_ij, ||f(x_j)||) pairs over all heads and all inputs: ``[(alpha, fnorm)]``, one
    tuple of equal-length 1-D float64 arrays per layer.

    ``emnlp2020/exp1_bert/relation_between_alpha_fx.py`` builds, for each input, layer and head::

        attentions[l][0,h,:seq_len[i],ids[0]==c].view(-1)       # α over (query row, key in class c), row-major
        norms[l][0][0,h,ids[0]==c].repeat(seq_len[i])           # ||f(x_key)|| repeated for every query row

    i.e. every query row ``0:seq_len`` (specials included) against every non-padding key (the union of its four
    classes). ``attns``/``norms``: one input's [L,H,n,n] / [L,H,n] or lists of them; ``lengths``: query rows
    ``0:length`` per input (default all); ``keys``: a boolean key mask per input (default all; pass the non-padding
    tokens, or one class to get that class's pairs). Dense (encoder) maps keep every (i, j). ``causal=True`` (a
    decoder's map, whose upper triangle is zero by masking, not by the model's choice) keeps only j <= i; the paper
    is on BERT and says nothing about decoders, this is our choice.

    Note the released script pools per *class* over *all layers and heads together* (one file per class:
    ``cls_attention.pt``, ``cls_fx.pt`` ...); per-layer pairs are returned here, ``pool_layers`` joins them.
    """
    if isinstance(attns, np.ndarray) and attns.ndim == 4:
        attns, norms = [attns], [norms]
    count = len(attns)
    lengths = [None] * count if lengths is None else list(lengths)
    keys = [None] * count if keys is None else list(keys)
    layers = np.asarray(attns[0]).shape[0]
    alphas: list[list[np.ndarray]] = [[] for _ in range(layers)]
    fnorms: list[list[np.ndarray]] = [[] for _ in range(layers)]
    for a, f, length, key in zip(attns, norms, lengths, keys, strict=True):
        a = np.asarray(a, dtype=np.float64)
        f = np.asarray(f, dtype=np.float64)
        n = a.shape[-1]
        rows = n if length is None else length
        key_mask = np.ones(n, dtype=bool) if key is None else np.asarray(key, dtype=bool)
        pair = np.zeros((rows, n), dtype=bool)
        pair[:, key_mask] = True
        if causal:
            pair &= np.tril(np.ones((rows, n), dtype=bool))
        qi, kj = np.nonzero(pair)  # row-major: (query, key) as .view(-1) lays them out
        for layer in range(layers):
            for h in range(a.shape[1]):
                alphas[layer].append(a[layer, h, qi, kj])
                fnorms[layer].append(f[layer, h, kj])
    return [(np.concatenate(alphas[i]), np.concatenate(fnorms[i])) for i in range(layers)]


def pool_layers(pairs: Sequence[tuple[np.ndarray, np.ndarray]]) -> tuple[np.ndarray, np.ndarray]:
    """All layers' pairs in one pool, as ``relation_between_alpha_fx.py`` saves them (one list over l, h, i)."""
    return np.concatenate([p[0] for p in pairs]), np.concatenate([p[1] for p in pairs])


def spearman(x: np.ndarray, y: np.ndarray) -> float:
    """Spearman's ρ with ties given their average rank: ``scipy.stats.spearmanr`` (``.correlation``), which the
    authors' code imports for its correlations (``emnlp2020/exp1_bert/relation_with_freq.py``,
    ``emnlp2021/src/relation_with_freq_utils.py``). NaN when either side is constant."""
    return float(spearmanr(np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)).statistic)


# ---------------------------------------------------------------------------------------------------------------
# Attention rollout: attention_graph_util.compute_joint_attention
# ---------------------------------------------------------------------------------------------------------------


def rollout(attn: np.ndarray, add_residual: bool = True) -> np.ndarray:
    """[L,H,n,n] -> [L,n,n]: ``get_joint_relevance`` of ``compute_corel_distilbert_sst.py`` up to its ``max``::

        att_sum_heads = full_att_mat.sum(axis=1) / full_att_mat.shape[1]        # mean over heads
        joint_attentions = compute_joint_attention(att_sum_heads, add_residual=True)

    and ``compute_joint_attention`` of ``attention_graph_util.py``: aug = A + I with each row renormalised to sum 1,
    joint[0] = aug[0], joint[i] = aug[i] @ joint[i-1] (rows = queries of layer i's output, columns = input tokens).
    """
    att = np.asarray(attn, dtype=np.float64)
    mat = att.sum(axis=1) / att.shape[1]
    if add_residual:
        mat = mat + np.eye(mat.shape[1])[None, ...]
        mat = mat / mat.sum(axis=-1)[..., None]
    joint = np.zeros(mat.shape)
    joint[0] = mat[0]
    for i in range(1, mat.shape[0]):
        joint[i] = mat[i].dot(joint[i - 1])
    return joint
