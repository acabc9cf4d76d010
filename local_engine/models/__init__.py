"""Model implementations (Llama family)."""

from .llama import LlamaForCausalLM

__all__ = ["LlamaForCausalLM"]
