"""The request of fact extraction: what to keep (by mode), how each fact is shaped, and the chunk itself.

The shape is upstream Hindsight's: each fact has ``what``, ``when``, ``where``, ``who`` and ``why``
("N/A" where nothing applies), a kind (``event`` or ``conversation``), dates for events, a type
(``world``, or ``assistant`` for what the assistant itself did), entities and, when asked for,
``causal_relations`` to other facts of the same reply. The wording is ours. The system prompt holds
nothing of the item, so servers that cache a prompt's prefix can reuse it; the item's date, context,
metadata, the mission and the text itself go in the user's message.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from ..llm.types import ChatRequest, Message, PromptBlock, prompt_text

INTRO = ("You read a text and write down the facts in it that are worth remembering, each as one "
         "self-contained entry in a long-term memory. Write every value in the language of the text; "
         "never translate.")

#: mode -> what to keep; ``custom`` gets the configured instructions instead
GUIDANCE = {
    "concise": """## What to keep
Keep facts someone would want to recall months later: who people are and how they relate, preferences \
and habits, significant events and decisions, plans, goals and deadlines, skills and experience, the \
context of projects and problems, and details of feeling or perception that characterise an experience. \
Leave out greetings, thanks, filler, "let me check" and anything already said. Merge statements about \
the same thing into one fact; one clear sentence beats three.""",
    "verbose": """## What to keep
Keep every fact with every detail the text gives: objects, quantities, places, people and their \
relationships, motives and feelings. Never summarise or drop a detail. `when` names the day of the \
week with the date. For an assistant fact, `why` says what the user asked for that led to it.""",
}

FORMAT = """## Each fact
- `what`: the fact itself, complete in one or two sentences.
- `when`: when it happened, with relative dates resolved; "N/A" if the text does not say.
- `where`: the place, if there is one; otherwise "N/A".
- `who`: the people involved and how they relate to each other or to the user; otherwise "N/A".
- `why`: why it matters, only when that is not obvious; otherwise "N/A".
- `fact_kind`: "event" for something that happened (or will happen) at a particular time; \
"conversation" for lasting states, preferences and traits.
- `occurred_start`, `occurred_end`: for events, ISO 8601 dates or date-times (the same value for a \
moment or a single day); null for anything else.
- `fact_type`: "assistant" for what the assistant itself did, found, decided or recommended; "world" \
for everything else, including what the user says about themselves, their preferences and corrections.
- `entities`: the people, organisations, places, notable things and themes the fact names, as plain \
strings; include "user" when the fact is about the user.

## Names and dates
- When the text gives both a role and a name for someone, write both: "Dana (the user's manager)".
- Resolve relative dates ("yesterday", "last spring", "tonight") against the Event Date given with the \
text, and write the resolved date in the fact instead of the relative word. Without an Event Date, \
leave relative dates as they are and set no occurred dates for them."""

CAUSAL = """## Causes
- `causal_relations`: when a fact was caused by another fact of this reply, \
[{"target_index": i, "relation_type": "caused_by"}] where i is the 0-based place of the cause in \
`facts` (another fact, never the fact itself); at most two per fact; [] when there is none."""

REPLY = 'Reply with one JSON object and nothing else: {"facts": [...]}; {"facts": []} when nothing is worth keeping.'

_NA = {"type": ["string", "null"]}


def system_blocks(mode: str, custom_instructions: str | None, causal: bool) -> list[PromptBlock]:
    """The system prompt's parts for a mode (:func:`system_prompt` joins the active ones).

    :param mode: ``concise``, ``verbose`` or ``custom``.
    :param custom_instructions: what to keep in ``custom`` mode.
    :param causal: ask for causal relations between facts.
    """
    guidance = PromptBlock(GUIDANCE[mode], "What to keep", "retain_extraction_mode") if mode != "custom" \
        else PromptBlock(f"## What to keep\n{custom_instructions}", "What to keep", "retain_custom_instructions", True)
    return [PromptBlock(INTRO), guidance, PromptBlock(FORMAT, "Each fact"),
            PromptBlock(CAUSAL, "Causes", "retain_extract_causal_links", active=causal), PromptBlock(REPLY)]


def system_prompt(mode: str, custom_instructions: str | None, causal: bool) -> str:
    """The system prompt for a mode (see :func:`system_blocks`)."""
    return prompt_text(system_blocks(mode, custom_instructions, causal))


def focus_block(mission: str | None) -> PromptBlock:
    """The mission, heading the user's message when there is one."""
    text = f"## Focus\n{mission}\nThis takes priority over the general guidance on what to keep.\n" if mission else ""
    return PromptBlock(text, "Focus", "retain_mission", True, active=bool(mission))


def item_block(text: str, *, position: str, when: str, context: str, metadata: Mapping[str, str]) -> PromptBlock:
    """The chunk and what the item says of it, each value already written out."""
    lines = [f"Chunk: {position}", f"Event Date: {when}", f"Context: {context}"]
    if metadata:
        lines += ["Metadata:", *(f"  {key}: {value}" for key, value in metadata.items())]
    lines += ["", "<text>", text, "</text>"]
    return PromptBlock("\n".join(lines))


def user_message(text: str, *, chunk: int, chunks: int, timestamp: datetime | None, context: str | None,
                 metadata: Mapping[str, str], mission: str | None) -> str:
    """The user's message for one chunk of an item: the mission (:func:`focus_block`), then the chunk.

    :param text: the chunk.
    :param chunk: its place among the item's chunks (0-based).
    :param chunks: how many chunks the item has.
    :param timestamp: when the item's content was written or said, for relative dates.
    :param context: what the content is (a conversation, a document ...), as the caller says.
    :param metadata: the item's metadata.
    :param mission: what the bank's memories are for.
    """
    when = f"{timestamp:%A, %B} {timestamp.day}, {timestamp.year} ({timestamp.isoformat()})" if timestamp \
        else "unknown"
    blocks = [focus_block(mission), item_block(text, position=f"{chunk + 1} of {chunks}", when=when,
                                               context=context or "none", metadata=metadata)]
    return prompt_text(blocks, "\n")


def reply_schema(causal: bool) -> dict[str, Any]:
    """The JSON Schema of a reply, which providers pass on to servers that enforce one.

    :param causal: facts carry ``causal_relations``.
    """
    fact: dict[str, Any] = {
        "type": "object",
        "properties": {
            "what": {"type": "string"}, "when": _NA, "where": _NA, "who": _NA, "why": _NA,
            "fact_kind": {"type": "string", "enum": ["event", "conversation"]},
            "occurred_start": _NA, "occurred_end": _NA,
            "fact_type": {"type": "string", "enum": ["world", "assistant"]},
            "entities": {"type": "array", "items": {"type": "string"}},
        },
        "required": ["what", "when", "where", "who", "why", "fact_type"],
    }
    if causal:
        fact["properties"]["causal_relations"] = {"type": ["array", "null"], "items": {
            "type": "object", "properties": {"target_index": {"type": "integer"},
                                             "relation_type": {"type": "string", "enum": ["caused_by"]}},
            "required": ["target_index", "relation_type"]}}
    return {"type": "object", "properties": {"facts": {"type": "array", "items": fact}}, "required": ["facts"]}


def extraction_request(system: str, message: str, schema: Mapping[str, Any], max_tokens: int) -> ChatRequest:
    """One chunk's request (before any repair)."""
    return ChatRequest(system=system, messages=[Message("user", message)], max_tokens=max_tokens,
                       json_schema=schema, schema_name="facts")
