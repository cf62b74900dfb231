"""Independent reference computations for the long-input analyses: retrieval heads (Wu et al. 2024) and attention
distance (Dosovitskiy et al. 2021; Xiao et al. 2024), written from the released code and the papers, not from the
project's ``atlas``.

Released code followed (bare mirror read at its HEAD):

* ``nightdessert/Retrieval_Head``, ``retrieval_head_detection.py``:

  - ``evaluate_and_log``: the prompt ids are computed once, ``model(input_ids[:, :-1], use_cache=True)`` fills the
    cache, then ``decode`` feeds the last prompt token;
  - ``decode``: one token a step with ``past_key_values`` and ``output_attentions=True``; the new token is
    ``logits[0, -1].argmax()``, appended, scored by ``retrieval_calculate``; stop on a newline (there the token
    ``'<0x0A>'`` or id 144, here any id of ``stop_ids``, checked after appending) or after ``decode_len`` (50) steps;
  - ``retrieval_calculate`` (``topk=1``): a head scores ``1 / (needle_end - needle_start)`` at a step when the key
    it attends most from the fed token lies in the needle and holds the token just generated;
  - the ROUGE filter: a test counts when ROUGE-1 recall * 100 of (needle, response) is over 50;
  - ``retrieval_head_accumulate``: each counted test's score is appended to ``head_counter["layer-head"]``, and a
    head's retrieval score is ``np.mean`` of its list;
  - ``find_needle_idx``: the first window of the prompt whose set of ids covers over 90 % of the needle's.

* Dosovitskiy et al. 2021 (ViT), the mean attention distance: the attention-weighted distance between query and
  key, here in tokens, averaged over queries.
* Xiao et al. 2024 (StreamingLLM): a cache that keeps the first tokens (attention sinks) and a recent window.

Everything returned is float64 numpy; nothing here imports the project.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np
import torch
from rouge_score import rouge_scorer

if TYPE_CHECKING:
    from transformers import PreTrainedModel

# ---------------------------------------------------------------------------------------------------------------
# Retrieval heads (nightdessert/Retrieval_Head)
# ---------------------------------------------------------------------------------------------------------------


def greedy_decode(
    model: PreTrainedModel, prompt_ids: list[int], max_new: int, stop_ids: set[int]
) -> tuple[list[int], list[list[np.ndarray]]]:
    """Greedy decoding as the released ``decode``: (generated ids, per step the attention rows of the fed token).

    The cache is filled with all prompt ids but the last (so the prompt needs two ids at least), then each step
    feeds one token: first the last prompt id, then the token the step before produced. A step's rows are one
    float64 array [heads, keys] per layer, taken from ``outputs.attentions[layer][0, :, -1]``. Decoding stops after
    ``max_new`` steps or once the new token is in ``stop_ids`` (that token is kept). The model must have been loaded
    with ``attn_implementation="eager"``; with another implementation transformers v5 returns no attentions (an
    empty tuple), which raises ValueError here.
    """
    generated: list[int] = []
    rows: list[list[np.ndarray]] = []
    prompt = torch.tensor([prompt_ids], device=model.device)
    with torch.inference_mode():
        cache = model(input_ids=prompt[:, :-1], use_cache=True).past_key_values
        fed = prompt[:, -1:]
        for _ in range(max_new):
            outputs = model(input_ids=fed, past_key_values=cache, use_cache=True, output_attentions=True)
            if not outputs.attentions:  # transformers v5 returns an empty tuple, not an error, without eager
                raise ValueError("the model returned no attentions: load it with attn_implementation='eager'")
            cache = outputs.past_key_values
            token = int(outputs.logits[0, -1].argmax())
            generated.append(token)
            rows.append([layer[0, :, -1].double().cpu().numpy() for layer in outputs.attentions])
            if token in stop_ids:
                break
            fed = torch.tensor([[token]], device=model.device)
    return generated, rows


def retrieval_scores(
    prompt_ids: Sequence[int],
    generated: Sequence[int],
    rows: Sequence[Sequence[np.ndarray]],
    needle_start: int,
    needle_end: int,
) -> np.ndarray:
    """``retrieval_calculate`` summed over the steps of one decoding: [layers, heads].

    At step s each head's most attended key i (of ``rows[s][layer][head]``) counts when
    ``needle_start <= i < needle_end`` and ``generated[s] == prompt_ids[i]``, adding ``1 / (needle_end -
    needle_start)``. The released code takes i by ``topk(1)``; here ``np.argmax``, the first maximal key on ties.
    """
    layers, heads = len(rows[0]), rows[0][0].shape[0]
    score = np.zeros((layers, heads))
    for token, step in zip(generated, rows, strict=True):
        for layer, attention in enumerate(step):
            for head in range(heads):
                i = int(np.argmax(attention[head]))
                if needle_start <= i < needle_end and token == prompt_ids[i]:
                    score[layer, head] += 1 / (needle_end - needle_start)
    return score


def head_scores(per_input: list[np.ndarray], recalls: list[float]) -> np.ndarray:
    """The retrieval score of each head: the mean of its scores over the inputs whose recall is over 50.

    ``per_input`` holds one [layers, heads] array (``retrieval_scores``) per input, ``recalls`` their ROUGE-1
    recalls (``rouge1_recall``). All NaN where no input passes.
    """
    passed = [score for score, recall in zip(per_input, recalls, strict=True) if recall > 50]
    if not passed:
        return np.full(per_input[0].shape, np.nan)
    return np.mean(passed, axis=0)


def rouge1_recall(reference: str, response: str) -> float:
    """ROUGE-1 recall * 100 of the response against the reference (the needle), with the released scorer."""
    scorer = rouge_scorer.RougeScorer(["rouge1", "rougeL"], use_stemmer=True)
    return scorer.score(reference, response)["rouge1"].recall * 100


def find_needle_idx(prompt_ids: Sequence[int], needle_ids: Sequence[int]) -> tuple[int, int]:
    """(start, end) of the needle in the prompt, as released; (-1, -1) when not found.

    For each prompt position i, the window ``prompt_ids[i : i + len(needle_ids)]`` (shorter at the end) matches
    when its set of ids covers over 90 % of the needle's set; the first match gives ``(i, i + len(needle_ids))``.
    """
    needle = set(needle_ids)
    span = len(needle_ids)
    for i in range(len(prompt_ids)):
        window = set(prompt_ids[i : i + span])
        if len(window & needle) / len(needle) > 0.9:
            return i, i + span
    return -1, -1


# ---------------------------------------------------------------------------------------------------------------
# Attention distance over dense maps [layers, heads, n, n] (rows = queries, columns = keys)
# ---------------------------------------------------------------------------------------------------------------


def distance_bucket(distance: int) -> int:
    """0 for distance 0, else ``distance.bit_length()``: 1 -> 1, 2-3 -> 2, 4-7 -> 3, ..."""
    return distance.bit_length()


def _distances(n: int) -> np.ndarray:
    """|query - key| for an n x n map."""
    positions = np.arange(n)
    return np.abs(positions[:, None] - positions[None, :])


def distance_profile(maps: np.ndarray) -> np.ndarray:
    """Attention mass per distance bucket, summed over all rows: [layers, heads, (n - 1).bit_length() + 1]."""
    layers, heads, n, _ = maps.shape
    profile = np.zeros((layers, heads, distance_bucket(n - 1) + 1))
    for i in range(n):
        for j in range(n):
            profile[:, :, distance_bucket(abs(i - j))] += maps[:, :, i, j]
    return profile


def mean_distance(maps: np.ndarray) -> np.ndarray:
    """ViT's mean attention distance in tokens: the mean over rows of sum_j a_ij * |i - j|; [layers, heads]."""
    return (maps * _distances(maps.shape[-1])).sum(axis=-1).mean(axis=-1)


def streaming_share(maps: np.ndarray, sink: int, window: int) -> np.ndarray:
    """The mean over rows of the mass on keys j with |i - j| < window or j < sink; [layers, heads].

    On a causal map (no mass on j > i) these keys are StreamingLLM's cache for query i: the first ``sink`` tokens
    (the attention sinks) and the last ``window`` tokens up to and including the query (i - window < j <= i).
    """
    n = maps.shape[-1]
    kept = (_distances(n) < window) | (np.arange(n)[None, :] < sink)
    return (maps * kept).sum(axis=-1).mean(axis=-1)
