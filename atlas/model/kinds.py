"""What kind of transformer a config describes: an encoder (bidirectional) or a decoder (causal language model),
and the roles a special token can have (tokens.role).

The ingest reads the kind to name special tokens by role (``<s>`` is a 'cls' token in RoBERTa, a 'bos' token
in Llama; ``atlas.ingestion.template``), the capture to know that no edge may point to a future token.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from atlas.model.families import family

if TYPE_CHECKING:
    from transformers import PretrainedConfig

ROLES = ("cls", "bos", "sep", "eos", "pad", "other")  # tokens.role; 'other': named by none of the attributes
START_ROLES = ("cls", "bos")  # attn_rows.to_cls: attention to the special tokens of these roles
END_ROLES = ("sep", "eos")  # attn_rows.to_sep


def is_decoder(config: PretrainedConfig) -> bool:
    """True for a causal (decoder-only) model: one of a decoder family (``families.FAMILIES``), or one whose config is
    marked ``is_decoder`` (BERT as a causal language model). A family not in the table is refused as ``load_model``
    refuses it (``families.family``): its kind is not known."""
    return family(config).decoder or bool(getattr(config, "is_decoder", False))
