"""Which chat model the settings choose, built once a caller needs it."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..errors import ConfigError
from .errors import LLMNotConfigured

if TYPE_CHECKING:
    from ..plugins import PluginManager
    from ..protocols import LLMProvider
    from ..settings import Settings

#: the provider upstream Hindsight assumes when only a key or a base URL is given
DEFAULT_PROVIDER = "openai"


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
