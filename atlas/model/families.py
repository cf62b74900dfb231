"""The model families the atlas takes, one row each, keyed by ``config.model_type``: encoder or decoder, where its
attention is captured, and how its longest input is read. A model of a family not in the table is refused in one
line (``family``): its attention would not be captured as the model computes it.

Adding a family is a row here and a test case in ``tests/test_families.py``, which checks the captured attention
equal to transformers' eager attention for every row. Nothing here imports torch or transformers, so that a model's
identity is told without them (``identity``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING

from atlas.errors import AtlasError, arg

if TYPE_CHECKING:
    from transformers import PretrainedConfig


@dataclass(frozen=True)
class Family:
    """What the atlas knows of a model family."""

    model_type: str  # config.model_type
    decoder: bool = False  # causal (decoder-only): a token attends to itself and the tokens before it; else an encoder
    # its attention goes through transformers' AttentionInterface, computed by the capture's own function (and so
    # readable in blocks of rows); else its own module computes it, and the capture reads the probabilities where
    # they enter the module's dropout (DeBERTa-v2's disentangled attention)
    interface: bool = True
    # its longest input is config.json's max_position_embeddings as written; else it is known once the model is
    # loaded (RoBERTa numbers its positions after the padding index, GPT-2 names it n_positions)
    plain_positions: bool = False


FAMILIES: Mapping[str, Family] = MappingProxyType(
    {
        row.model_type: row
        for row in (
            Family("bert", plain_positions=True),
            Family("roberta"),
            Family("xlm-roberta"),
            Family("electra"),
            Family("distilbert"),
            Family("albert"),
            Family("deberta-v2", interface=False),  # DeBERTa v2 and v3
            Family("modernbert"),
            Family("gpt2", decoder=True),
            Family("llama", decoder=True),
            Family("mistral", decoder=True),
            Family("qwen2", decoder=True),
            Family("qwen3", decoder=True),
            Family("gemma", decoder=True),
            Family("gemma2", decoder=True),
            Family("gemma3_text", decoder=True),
            Family("phi", decoder=True),
            Family("phi3", decoder=True),
        )
    }
)


def family(config: PretrainedConfig, who: str | None = None) -> Family:
    """The row of the config's family. A family not in ``FAMILIES`` is refused in one line naming the model (``who``;
    by default the model's source as the config records it) and its architecture."""
    row = FAMILIES.get(config.model_type)
    if row is None:
        who = who or arg("model", repr(config.name_or_path))
        architecture = (config.architectures or [config.model_type])[0]
        raise AtlasError(
            f"{who}: architecture {architecture} (model_type {config.model_type}) is not supported; "
            f"attention is captured for {', '.join(FAMILIES)}"
        )
    return row


def kv_heads(config: PretrainedConfig, n_heads: int) -> int:
    """The model's key/value heads: fewer than its ``n_heads`` query heads under grouped-query attention (Llama,
    Mistral, Qwen, Gemma: ``num_key_value_heads``), else as many."""
    return getattr(config, "num_key_value_heads", None) or n_heads
