"""The model's own greedy continuation of an input (the needle probe's answer, ``--format needle``), as Wu et al.'s
released ``decode`` continues a prompt: the prompt but its last token run with the KV cache (here ``PREFILL``
tokens at a time, so that no attention map is longer than that in queries), then the last token fed, the argmax
of the last logits taken and fed back, until a stop token (kept) or the most new tokens. No sampling, penalty or
other processing of the logits, whatever the model's generation config says."""

from __future__ import annotations

import torch

from atlas.errors import AtlasError
from atlas.model.load import LoadedModel

PREFILL = 1024  # prompt tokens run at once: their maps, [heads, PREFILL, n] a layer, are all the pass holds


def greedy_continuation(
    lm: LoadedModel, lead: list[int], pieces: list[int], new_tokens: int, stop: frozenset[int], device: torch.device
) -> list[int]:
    """The ids ``lm`` generates greedily after ``lead`` (the template's special tokens before a text) + ``pieces``:
    at most ``new_tokens``, the last one a stop id where one comes."""
    ids = lead + pieces
    if new_tokens < 1 or not ids:
        return []
    lm.model.to(device)
    cache, generated, token = None, [], ids[-1]
    with torch.inference_mode():
        for lo in range(0, len(ids) - 1, PREFILL):
            chunk = torch.tensor([ids[lo : min(lo + PREFILL, len(ids) - 1)]], device=device)
            cache = lm.model(input_ids=chunk, past_key_values=cache, use_cache=True).past_key_values
        for _ in range(new_tokens):
            out = lm.model(input_ids=torch.tensor([[token]], device=device), past_key_values=cache, use_cache=True)
            cache, token = out.past_key_values, int(out.logits[0, -1].argmax())
            generated.append(token)
            if token in stop:
                break
    return generated


def causal_lm() -> type:
    """The class a model that continues its inputs is loaded with: its language-model head too."""
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM


def check_generates(lm: LoadedModel, given: str) -> None:
    """Refuse, before anything is written, a model that cannot continue an input: an encoder, or a checkpoint
    without the weights of its language-model head."""
    if not lm.decoder:
        raise AtlasError(f"{given}: {lm.name} is an encoder; the probe asks a decoder to answer (a causal LM)")
    fresh = [name for name in lm.fresh_weights if not name.startswith(lm.model.base_model_prefix)]
    if fresh and not lm.random_init:
        raise AtlasError(f"{given}: {lm.name}'s checkpoint holds no weights of its language-model head ({fresh[0]})")
