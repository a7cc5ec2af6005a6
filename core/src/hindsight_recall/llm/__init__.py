"""Chat models behind one small protocol: core sends a prompt and gets text back, whoever serves it.

A provider is a plugin of kind ``llm`` (:class:`~hindsight_recall.protocols.LLMProvider`): the
OpenAI-compatible chat-completions provider ships with core under several names (one per server
preset); Anthropic and Gemini are separate distributions. :func:`~.select.create_llm` picks one from
``HINDSIGHT_API_LLM_PROVIDER`` (upstream Hindsight's setting names and provider names).
"""

from .errors import LLMError, LLMNotConfigured, LLMOutputError, LLMTimeout
from .types import ChatReply, ChatRequest, Usage

__all__ = ["ChatReply", "ChatRequest", "LLMError", "LLMNotConfigured", "LLMOutputError", "LLMTimeout", "Usage"]
