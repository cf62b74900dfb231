"""The model's own greedy continuation of an input (the needle probe's answer, ``--format needle``): transformers'
``generate`` without sampling, with its KV cache, as Wu et al.'s released ``decode`` continues a prompt step by
step (the argmax of the last logits, fed back), stopping after a stop token or at the most new tokens."""

from __future__ import annotations

import torch
from transformers import GenerationConfig

from atlas.errors import AtlasError
from atlas.model.load import LoadedModel


def greedy_continuation(
    lm: LoadedModel, lead: list[int], pieces: list[int], new_tokens: int, stop: frozenset[int], device: torch.device
) -> list[int]:
    """The ids ``lm`` generates greedily after ``lead`` (the template's special tokens before a text) + ``pieces``:
    at most ``new_tokens``, the last one a stop id where one comes."""
    if new_tokens < 1:
        return []
    lm.model.to(device)
    ids = torch.tensor([lead + pieces], device=device)
    config = GenerationConfig(
        max_new_tokens=new_tokens,
        do_sample=False,
        eos_token_id=sorted(stop) or None,
        pad_token_id=sorted(stop)[0] if stop else 0,
    )
    with torch.inference_mode():
        out = lm.model.generate(ids, attention_mask=torch.ones_like(ids), generation_config=config)
    return out[0, ids.shape[1] :].tolist()


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
