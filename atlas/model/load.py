"""Load a model (safetensors only, no remote code; float32, bfloat16 or float16 weights) and run it with attention
captured
(``atlas.model.capture``, whose softmax and recorded probabilities are float32 in every dtype): encoders and
decoder-only models of the families ``families.FAMILIES`` names.

A model of another architecture is refused with a one-line error naming it (``families.family``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

import torch
import transformers
from safetensors import SafetensorError
from transformers import AutoModel, AutoTokenizer, PreTrainedModel

from atlas import checks
from atlas.errors import AtlasError, arg
from atlas.model.capture import CAPTURE, prepare
from atlas.model.families import family
from atlas.model.identity import (
    DEFAULT_MODEL,
    config_hash,
    default_model_path,
    hub_unreachable,
    overrides_text,
    read_config,
    weights_hash,
)
from atlas.model.kinds import is_decoder

transformers.utils.logging.disable_progress_bar()
transformers.utils.logging.set_verbosity_error()  # a task head's fresh weights are expected, not news

# the weights' dtypes (``--dtype``, resolved: see atlas.ingestion.device.resolve_dtype)
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


@dataclass
class LoadedModel:
    model: PreTrainedModel
    tokenizer: transformers.PreTrainedTokenizerBase
    name: str  # as the user named it
    source: str  # local path or hub id it was loaded from
    model_hash: str  # sha256 of the weights, or of config + seed for a random init
    n_layers: int
    n_heads: int
    max_positions: int
    decoder: bool = False  # causal self-attention: a token attends to itself and the tokens before it
    random_init: bool = False
    seed: int = 0
    dtype: str = "float32"  # the weights' dtype (a key of DTYPES)
    config_overrides: dict[str, object] = field(default_factory=dict)  # set on the config as read
    # the weights the checkpoint does not hold, initialised under ``seed`` (a task head an encoder lacks)
    fresh_weights: tuple[str, ...] = ()


def load_model(
    name: str | None,
    random_init: bool = False,
    seed: int = 0,
    auto_class: type = AutoModel,
    dtype: str = "float32",
    **config_overrides: object,
) -> LoadedModel:
    """Load a model by hub id or local path (the embedded default when ``name`` is None).

    ``auto_class`` picks the head (``AutoModel``: the bare encoder; a task head's weights are
    initialised under ``seed`` when the checkpoint has none); ``dtype``: the weights' dtype, float32, bfloat16
    or float16 (the attention softmax stays float32: ``atlas.model.capture``); ``config_overrides`` go to its
    config (a key it has not is refused naming ``config``; with ``random_init`` they are part of the hash).
    """
    if dtype not in DTYPES:
        raise AtlasError(f"{arg('dtype', repr(dtype))}: expected one of {', '.join(DTYPES)}")
    checks.named("model", name, "empty; name a hub id or a folder, or leave it out")
    source = default_model_path() if name is None else name
    shown = name or DEFAULT_MODEL
    given = arg("model", repr(shown))
    # a hub id is NAME or ORG/NAME; a path starts with '.', '/' or '~', or has more parts
    looks_local = source.startswith((".", os.sep, "~")) or source.count(os.sep) > 1 or Path(source).exists()
    if looks_local and not Path(source).is_dir():
        raise AtlasError(f"{given}: no such model directory")
    if looks_local and not (Path(source) / "config.json").is_file():
        raise AtlasError(f"{given}: no config.json in this folder (a model's folder holds config, weights, tokenizer)")
    if looks_local:  # recorded as runs.model_source: found again from any folder (runs.model keeps what was typed)
        source = str(Path(source).expanduser().resolve())
    unreachable = None if looks_local else hub_unreachable()
    local_only = unreachable is not None  # then read from the Hugging Face cache alone
    built = False  # the config is read: an error from here on is the model's, built with the overrides
    fresh: tuple[str, ...] = ()
    try:
        config = read_config(source, config_overrides, shown)
        family(config, given)  # a family not in the table is refused here, before the tokenizer loads
        tokenizer = AutoTokenizer.from_pretrained(source, trust_remote_code=False, local_files_only=local_only)
        _check_tokenizer(tokenizer, given)  # before the weights load
        if config_overrides:
            _check_shape(config, len(tokenizer), config_overrides, shown)
        torch.manual_seed(seed)
        built = True
        if random_init:
            model_hash = config_hash(config.to_json_string(), seed)  # as read: building the model sets its dtype
            model = auto_class.from_config(
                config, attn_implementation=CAPTURE, dtype=DTYPES[dtype], trust_remote_code=False
            )
        else:
            model, loading = auto_class.from_pretrained(
                source,
                config=config,
                attn_implementation=CAPTURE,
                dtype=DTYPES[dtype],
                use_safetensors=True,
                trust_remote_code=False,
                local_files_only=local_only,
                output_loading_info=True,
            )
            fresh = tuple(sorted(loading["missing_keys"]))
            model_hash = weights_hash(source)
    except (OSError, ValueError, KeyError, RuntimeError, TypeError, SafetensorError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        if built and random_init and config_overrides:  # the overrides make a model that cannot be built
            overrides = arg("config", overrides_text(config_overrides))
            raise AtlasError(f"{overrides}: {shown} cannot be built so ({first})") from None
        if isinstance(exc, TypeError):
            raise
        if unreachable and isinstance(exc, OSError):
            raise AtlasError(
                f"{given}: not a folder here, and not in the Hugging Face cache; the hub cannot be reached "
                f"({unreachable})"
            ) from None
        raise AtlasError(f"{given}: cannot load it ({first})") from None
    prepare(model)
    model.eval()
    return LoadedModel(
        model=model,
        tokenizer=tokenizer,
        name=shown,
        source=source,
        model_hash=model_hash,
        n_layers=config.num_hidden_layers,
        n_heads=config.num_attention_heads,
        max_positions=_max_positions(model),
        decoder=is_decoder(config),
        random_init=random_init,
        seed=seed,
        dtype=dtype,
        config_overrides=dict(config_overrides),
        fresh_weights=fresh,
    )


def _check_tokenizer(tokenizer: transformers.PreTrainedTokenizerBase, given: str) -> None:
    if not tokenizer.is_fast:
        raise AtlasError(f"{given}: a fast tokenizer is required")
    if tokenizer.vocab_size == 0:  # AutoTokenizer makes an empty one of a folder without tokenizer files
        raise AtlasError(f"{given}: no tokenizer files (tokenizer.json, or its tokenizer's vocabulary files)")


def _check_shape(config: transformers.PretrainedConfig, pieces: int, overrides: dict[str, object], shown: str) -> None:
    """Refuse, naming ``config``, overrides that leave the model without a layer or a head, or with fewer
    embeddings than its tokenizer has pieces: it would be built, and fail mid-ingest."""
    texts = overrides_text(overrides)
    for key in ("num_hidden_layers", "num_attention_heads"):
        value = getattr(config, key, None)
        if isinstance(value, int) and value < 1:
            raise AtlasError(f"{arg('config', texts)}: {shown} cannot be built so ({key} {value}: expected 1 or more)")
    vocab = getattr(config, "vocab_size", None)
    if isinstance(vocab, int) and vocab < pieces:
        why = f"vocab_size {vocab}: its tokenizer has {pieces:,} pieces"
        raise AtlasError(f"{arg('config', texts)}: {shown} cannot be built so ({why})")


def _max_positions(model: PreTrainedModel) -> int:
    """The longest input the model takes (``n_positions`` for GPT-2 through transformers' attribute map).
    RoBERTa-style embeddings number positions from ``padding_idx + 1``: 514 position vectors take 512 tokens."""
    positions = getattr(model.config, "max_position_embeddings", 512)
    embedding = getattr(getattr(model.base_model, "embeddings", None), "position_embeddings", None)
    if isinstance(embedding, torch.nn.Embedding) and embedding.padding_idx is not None:
        positions -= embedding.padding_idx + 1
    return positions
