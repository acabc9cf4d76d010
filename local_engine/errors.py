"""Engine errors. Each subclasses a builtin so callers that catch ``ValueError`` /
``FileNotFoundError`` keep working; the server maps them to HTTP 4xx."""

from __future__ import annotations


class EngineError(ValueError):
    """A request or configuration the engine cannot serve (bad parameters, bad model file)."""


class RequestTooLongError(EngineError):
    """A prompt (plus room for at least one output token) exceeds ``max_model_len`` or can
    never fit the KV-cache pool. The message names both lengths."""

    def __init__(self, message: str, *, prompt_len: int, limit: int):
        super().__init__(message)
        self.prompt_len = prompt_len
        self.limit = limit


class ModelNotFoundError(EngineError, FileNotFoundError):
    """The model path does not exist or holds no loadable model (no ``.gguf``, no
    ``config.json`` + ``*.safetensors``)."""


__all__ = ["EngineError", "RequestTooLongError", "ModelNotFoundError"]
