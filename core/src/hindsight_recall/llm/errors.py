"""Errors of chat-model calls; each carries the HTTP status and code the service answers with."""

from __future__ import annotations

from ..errors import RecallError

#: the settings that choose and reach a chat model, as upstream Hindsight names them
LLM_SETTINGS = ("HINDSIGHT_API_LLM_PROVIDER", "HINDSIGHT_API_LLM_MODEL", "HINDSIGHT_API_LLM_API_KEY",
                "HINDSIGHT_API_LLM_BASE_URL")


class LLMError(RecallError):
    """The chat model could not be reached or answered with an error (a bad gateway for the caller)."""

    status = 502
    code = "llm_error"
    #: the HTTP status the model's server answered, when it answered with an error
    answered: int | None = None


class LLMNotConfigured(LLMError):
    """No chat model is configured, so nothing that needs one can run."""

    status = 501
    code = "llm_not_configured"

    def __init__(self, what: str = "reflect", problem: str | None = None) -> None:
        """Name what needed the model and the settings to set.

        :param what: what needed it, e.g. ``reflect``.
        :param problem: why the configured model cannot be used, when one is configured.
        """
        head = f"{what} needs a chat model and {problem or 'none is configured'}"
        super().__init__(
            f"{head}: set HINDSIGHT_API_LLM_PROVIDER (e.g. openai, ollama, lmstudio, anthropic, gemini), "
            "HINDSIGHT_API_LLM_MODEL, and HINDSIGHT_API_LLM_API_KEY or HINDSIGHT_API_LLM_BASE_URL as the "
            "provider needs (docs/configuration.md#chat-model)"
        )
        self.settings = LLM_SETTINGS


class LLMTimeout(LLMError):
    """The chat model did not answer within ``HINDSIGHT_API_LLM_TIMEOUT`` (or the operation's own, e.g.
    ``HINDSIGHT_API_RETAIN_LLM_TIMEOUT``)."""

    status = 504
    code = "llm_timeout"


class LLMOutputError(LLMError):
    """The model's reply did not have the asked-for form, even after one request to repair it."""

    code = "llm_invalid_output"
