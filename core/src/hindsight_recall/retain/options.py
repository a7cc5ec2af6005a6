"""What shapes one extraction: the process's ``RETAIN_*`` settings, under a bank's overrides, under a request's.

Upstream Hindsight lets a bank override what its retain model is asked (``PATCH .../config`` with
``retain_mission``, ``retain_extraction_mode``, ``retain_custom_instructions``,
``retain_extract_causal_links``, ``retain_chunk_size``), and a dry run override them again for one
call. Each layer is checked as the settings are, and the result as a whole: ``custom`` mode needs
its instructions from some layer.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from ..errors import InvalidRequest
from ..settings import ExtractionSettings

#: the setting names a layer may give, as banks store them and requests send them
FIELDS = tuple(ExtractionSettings.model_fields)


@dataclass(frozen=True)
class ExtractionOptions:
    """The settings one extraction runs with (see :func:`extraction_options`)."""

    mode: str = "concise"
    custom_instructions: str | None = None
    causal_links: bool = True
    chunk_size: int = 3000
    #: what the bank's memories are for; the model weighs what to keep by it
    mission: str | None = None

    def as_settings(self) -> dict[str, Any]:
        """These options under their setting names (``retain_mission`` ...)."""
        return {"retain_extraction_mode": self.mode, "retain_custom_instructions": self.custom_instructions,
                "retain_extract_causal_links": self.causal_links, "retain_chunk_size": self.chunk_size,
                "retain_mission": self.mission}


def extraction_options(settings: ExtractionSettings, *layers: Mapping[str, Any]) -> ExtractionOptions:
    """The process's settings with each layer's values over them, in order (a bank's overrides, then a
    request's); a layer's keys other than :data:`FIELDS` are not its business and are passed over.

    :param settings: the process's settings.
    :param layers: setting name -> value; a key present overrides, ``None`` included (a request leaves
        out what it does not set).
    :raises InvalidRequest: (400) a value out of range or of the wrong type, naming the setting, or
        ``custom`` mode without instructions.
    """
    values = {name: getattr(settings, name) for name in FIELDS}
    for layer in layers:
        values.update({key: value for key, value in layer.items() if key in FIELDS})
    try:
        checked = ExtractionSettings(**values)
    except ValidationError as exc:
        err = exc.errors()[0]
        name = ".".join(str(p) for p in err["loc"]) or "config"
        raise InvalidRequest(name, f"{err['msg']} (got {err.get('input')!r})", status=400) from None
    if checked.retain_extraction_mode == "custom" and not checked.retain_custom_instructions:
        raise InvalidRequest("retain_custom_instructions", "extraction mode 'custom' needs the instructions that say "
                             "what to extract: set retain_custom_instructions (in the request, the bank's config or "
                             "HINDSIGHT_API_RETAIN_CUSTOM_INSTRUCTIONS), or choose mode 'concise' or 'verbose'",
                             status=400)
    return ExtractionOptions(checked.retain_extraction_mode, checked.retain_custom_instructions,
                             checked.retain_extract_causal_links, checked.retain_chunk_size, checked.retain_mission)
