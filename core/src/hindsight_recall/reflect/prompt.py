"""The prompt of reflect: the bank's mission and disposition, the recalled memories, the question.

As upstream Hindsight documents it, the bank's mission is the model's role, its name heads the
prompt, and a disposition the bank has changed from neutral is spelt out trait by trait (an
all-neutral one adds nothing). The wording is ours. The model sees each memory with its id and must
answer as one JSON object: the answer, the ids it used and, when asked, output fitting a schema.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from ..llm.types import ChatRequest, Message, PromptBlock, prompt_text

DEFAULT_ROLE = "You are the memory of an assistant. You answer questions from what you remember, and only from that."
NEUTRAL = 3
#: trait -> what levels 1..5 ask of the answer
TRAITS: dict[str, tuple[str, str, str, str, str]] = {
    "skepticism": (
        "Take the memories at their word.",
        "Trust the memories, but note what plainly contradicts.",
        "Weigh the memories evenly, neither credulous nor doubting.",
        "Question how reliable each memory is before leaning on it.",
        "Treat every memory as a claim to check; say what is uncertain or unsupported.",
    ),
    "literalism": (
        "Read between the lines and infer what people meant.",
        "Consider implied meaning alongside what was said.",
        "Balance the literal words with their context.",
        "Prefer what was literally said over inference.",
        "Hold to the exact words and commitments; infer nothing.",
    ),
    "empathy": (
        "Stick to facts; leave feelings aside.",
        "Put facts first, but acknowledge feelings where they matter.",
        "Balance facts with how the people involved feel.",
        "Give real weight to feelings and circumstances.",
        "Put the feelings and circumstances of the people involved first.",
    ),
}
#: the memory fields the model sees besides id and text
MEMORY_FIELDS = ("type", "context", "occurred_start", "occurred_end", "mentioned_at", "tags")


def disposition_lines(disposition: Mapping[str, Any]) -> list[str]:
    """The disposition as instructions, or nothing when every trait is neutral (3).

    :param disposition: trait -> level 1..5.
    """
    levels = {t: disposition.get(t, NEUTRAL) for t in TRAITS}
    if all(level == NEUTRAL for level in levels.values()):
        return []
    lines = ["## Disposition"]
    for trait, level in levels.items():
        if isinstance(level, int) and 1 <= level <= 5:
            lines.append(f"- {trait} {level}/5: {TRAITS[trait][level - 1]}")
    return lines


def system_blocks(profile: Mapping[str, Any], structured: bool) -> list[PromptBlock]:
    """The system prompt's parts for a bank (:func:`system_prompt` joins the active ones).

    :param profile: the bank's profile (``name``, ``mission``, ``disposition``, and the ``directives`` that apply).
    :param structured: the reply also carries ``structured_output``.
    """
    mission = (profile.get("mission") or "").strip()
    role = PromptBlock(mission, "Mission", "mission", True) if mission \
        else PromptBlock(DEFAULT_ROLE, "Mission", "mission")
    disposition = disposition_lines(profile.get("disposition") or {})
    rules = profile.get("directives") or ()
    directives = ["## Directives", "Follow these rules in every answer, the first ones first:",
                  *(f"- {rule['name']}: {rule['content']}" for rule in rules)] if rules else []
    shape = '{"answer": "...", "memory_ids": ["..."]' + (', "structured_output": {...}}' if structured else "}")
    how = [
        "## How to answer",
        "- Answer from the memories in the user's message and from nothing else. If they do not hold the "
        "answer, say so plainly; never make up facts.",
        "- `answer` is the answer in Markdown, written for the person who asked.",
        "- `memory_ids` lists the id of every memory the answer relies on, copied exactly; no other ids.",
    ]
    if structured:
        how.append("- `structured_output` is the answer again as an object that fits the JSON Schema given "
                   "in the user's message.")
    how += [f"- Reply with one JSON object and nothing else: {shape}"]
    return [PromptBlock(f"## Memory bank: {profile.get('name') or profile.get('bank_id', '')}", "Memory bank", "name",
                        True),
            role,
            PromptBlock("\n".join(disposition), "Disposition", "disposition", True, active=bool(disposition)),
            PromptBlock("\n".join(directives), "Directives", "directives", True, active=bool(directives)),
            PromptBlock("\n".join(how), "How to answer")]


def system_prompt(profile: Mapping[str, Any], structured: bool) -> str:
    """The system prompt for a bank (see :func:`system_blocks`)."""
    return prompt_text(system_blocks(profile, structured))


#: the user's message of :func:`user_prompt` with its values as placeholders
USER_TEMPLATE = ("Today is {today}.\n\n## Memories ({count})\n{one JSON object per recalled memory: id, text, "
                 + ", ".join(MEMORY_FIELDS) + "}\n\n## Question\n{query}")


def memory_view(memory: Mapping[str, Any]) -> dict[str, Any]:
    """What the model sees of one recalled memory."""
    view: dict[str, Any] = {"id": memory["id"], "text": memory["text"]}
    view.update({k: memory[k] for k in MEMORY_FIELDS if memory.get(k)})
    return view


def user_prompt(question: str, memories: Sequence[Mapping[str, Any]], now: datetime,
                response_schema: Mapping[str, Any] | None) -> str:
    """The user's message: today's date, the memories as JSON lines, the question, and the schema if any."""
    lines = [f"Today is {now.date().isoformat()}.", "", f"## Memories ({len(memories)})"]
    lines += [json.dumps(memory_view(m), ensure_ascii=False) for m in memories] or ["(none)"]
    lines += ["", "## Question", question]
    if response_schema is not None:
        lines += ["", "## JSON Schema of structured_output", json.dumps(response_schema, ensure_ascii=False)]
    return "\n".join(lines)


def reply_schema(response_schema: Mapping[str, Any] | None) -> dict[str, Any]:
    """The JSON Schema of the whole reply, which providers pass on to servers that enforce one."""
    properties: dict[str, Any] = {"answer": {"type": "string"},
                                  "memory_ids": {"type": "array", "items": {"type": "string"}}}
    required = ["answer", "memory_ids"]
    if response_schema is not None:
        properties["structured_output"] = dict(response_schema)
        required.append("structured_output")
    return {"type": "object", "properties": properties, "required": required}


def first_request(profile: Mapping[str, Any], question: str, memories: Sequence[Mapping[str, Any]], now: datetime,
                  max_tokens: int, response_schema: Mapping[str, Any] | None) -> ChatRequest:
    """The one request reflect sends (before any repair).

    :param profile: the bank's profile.
    :param question: the query, with any context appended.
    :param memories: the recall's results, best first.
    :param now: today, for relative dates in the question.
    :param max_tokens: the most tokens the reply may take.
    :param response_schema: the caller's schema for ``structured_output``, if any.
    """
    return ChatRequest(
        system=system_prompt(profile, response_schema is not None),
        messages=[Message("user", user_prompt(question, memories, now, response_schema))],
        max_tokens=max_tokens, json_schema=reply_schema(response_schema), schema_name="reflect_answer",
    )

