"""Reflect: answer a question from a bank's memories with the configured chat model (one recall, one answer)."""

from .run import Reflector, close_reflector, reflector_for

__all__ = ["Reflector", "close_reflector", "reflector_for"]
