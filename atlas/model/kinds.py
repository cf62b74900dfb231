"""What kind of transformer a config describes: an encoder (bidirectional) or a decoder (causal language model),
and the roles a special token can have (tokens.role).

The ingest reads the kind to name special tokens by role (``<s>`` is a 'cls' token in RoBERTa, a 'bos' token
in Llama; ``ingest.template``), the capture to know that no edge may point to a future token.
"""

from __future__ import annotations

from transformers import PretrainedConfig

ROLES = ("cls", "bos", "sep", "eos", "pad", "other")  # tokens.role; 'other': named by none of the attributes
START_ROLES = ("cls", "bos")  # attn_rows.to_cls: attention to the special tokens of these roles
END_ROLES = ("sep", "eos")  # attn_rows.to_sep

# model_type of the decoder-only (causal LM) families transformers ships
DECODER_TYPES = frozenset(
    {
        "bloom",
        "codegen",
        "cohere",
        "falcon",
        "gemma",
        "gemma2",
        "gemma3",
        "gemma3_text",
        "gpt2",
        "gpt_bigcode",
        "gpt_neo",
        "gpt_neox",
        "gptj",
        "granite",
        "llama",
        "mistral",
        "mixtral",
        "mpt",
        "olmo",
        "olmo2",
        "opt",
        "phi",
        "phi3",
        "qwen2",
        "qwen2_moe",
        "qwen3",
        "qwen3_moe",
        "stablelm",
        "starcoder2",
    }
)


def is_decoder(config: PretrainedConfig) -> bool:
    """True for a causal (decoder-only) model: a known decoder family, or a config marked ``is_decoder``."""
    return config.model_type in DECODER_TYPES or bool(getattr(config, "is_decoder", False))
