"""Which chat model the settings choose, built once a caller needs it."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..errors import ConfigError
from .errors import LLMNotConfigured

if TYPE_CHECKING:
    from ..plugins import PluginManager
    from ..protocols import LLMProvider
    from ..settings import Settings

#: the provider upstream Hindsight assumes when only a key or a base URL is given
DEFAULT_PROVIDER = "openai"
#: the ``LLM_*`` settings an operation may give its own value as ``<OPERATION>_LLM_*`` (upstream's names)
OPERATION_FIELDS = ("provider", "model", "api_key", "base_url", "timeout", "max_retries", "initial_backoff",
                    "max_backoff", "max_concurrent")


def operation_settings(settings: Settings, operation: str) -> Settings:
    """The settings an operation's provider reads: its own ``<OPERATION>_LLM_*`` values over the ``LLM_*`` ones.

    Providers read only ``LLM_*``, so an operation with a model of its own gets a copy with its values in
    their place; the copy knows which variable set each (:meth:`Settings.variable`), so that a timeout's
    message names the one to raise. As upstream, a provider of its own without a model of its own takes
    that provider's default model rather than ``LLM_MODEL`` (which names a model of the other provider).

    :param settings: core settings.
    :param operation: the settings' prefix, e.g. ``retain``.
    """
    update: dict[str, tuple[str, Any]] = {}
    for name in OPERATION_FIELDS:
        own = f"{operation}_llm_{name}"
        value = getattr(settings, own)
        if value is not None:
            update[f"llm_{name}"] = (settings.variable(own), value)
    if "llm_provider" in update and "llm_model" not in update:
        update["llm_model"] = (settings.variable(f"{operation}_llm_model"), None)
    return settings.copy_from(update) if update else settings


def provider_name(settings: Settings) -> str | None:
    """The chosen provider's name, or ``None`` when no chat model is configured.

    ``HINDSIGHT_API_LLM_PROVIDER`` names it (``none`` turns it off); unset, a key or a base URL alone
    means upstream's default, ``openai``; with neither, there is none.

    :param settings: core settings.
    """
    name = settings.llm_provider
    if name == "none":
        return None
    if name:
        return name
    key = settings.llm_api_key.get_secret_value() if settings.llm_api_key else ""
    return DEFAULT_PROVIDER if key or settings.llm_base_url else None


def create_llm(settings: Settings, plugins: PluginManager, what: str = "reflect") -> LLMProvider:
    """Build the chosen provider.

    :param settings: core settings.
    :param plugins: the plugin manager holding the ``llm`` providers.
    :param what: what needs it, for the message.
    :raises LLMNotConfigured: when none is chosen, the name is not installed, or a setting it needs is unset.
    """
    name = provider_name(settings)
    if name is None:
        raise LLMNotConfigured(what)
    try:
        provider: LLMProvider = plugins.create("llm", name, settings, "HINDSIGHT_API_LLM_PROVIDER")
    except ConfigError as exc:
        raise LLMNotConfigured(what, f"the configured one cannot be used ({exc})") from None
    return provider
