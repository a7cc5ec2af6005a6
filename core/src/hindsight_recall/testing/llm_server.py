"""Chat-model protocols for :class:`~hindsight_recall.testing.http_server.FixtureServer`: a stand-in model.

The routes speak OpenAI's chat completions, Anthropic's Messages API and Gemini's generateContent,
each with and without server-sent events, as their documentation describes. The "model" answers
reflect's prompt deterministically: it cites the first memories the prompt lists, quotes them, and
fills any JSON Schema it is given with the simplest fitting values. Asked for retain's facts, it
makes one fact of each sentence of the text. Tests queue other replies (malformed, 429, slow) with
:meth:`FixtureServer.script`.
"""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from .http_server import FixtureServer, Reply, Request, Routes

_MEMORY_LINE = re.compile(r'^\{"id": ')
_TEXT = re.compile(r"<text>\n(?P<text>.*?)\n</text>", re.DOTALL)
_SENTENCE = re.compile(r"[^.!?\n]+[.!?]?")
_SCHEMA_HEAD = "## JSON Schema of structured_output"
#: how many of the prompt's memories the stand-in cites
CITED = 2


def instance_of(schema: Mapping[str, Any], root: Mapping[str, Any] | None = None) -> Any:
    """The simplest value that fits ``schema`` (objects get every property, arrays one item).

    :param schema: a JSON Schema.
    :param root: the document ``$ref`` paths resolve against (default: ``schema``).
    """
    root = root if root is not None else schema
    if "$ref" in schema:
        target: Any = root
        for part in str(schema["$ref"]).lstrip("#/").split("/"):
            target = target[part]
        return instance_of(target, root)
    if "const" in schema:
        return schema["const"]
    if schema.get("enum"):
        return schema["enum"][0]
    for key in ("anyOf", "oneOf", "allOf"):
        options = [o for o in schema.get(key, ()) if o.get("type") != "null"]
        if options:
            return instance_of(options[0], root)
    kind = schema.get("type", "object")
    kind = next((k for k in kind if k != "null"), "null") if isinstance(kind, list) else kind
    if kind == "object":
        return {name: instance_of(sub, root) for name, sub in (schema.get("properties") or {}).items()}
    if kind == "array":
        return [instance_of(schema.get("items") or {"type": "string"}, root)] * max(1, schema.get("minItems", 1))
    return {"string": "from memory", "integer": 1, "number": 1.0, "boolean": True}.get(kind)


def facts_for(prompt: str, schema: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The stand-in's reply to retain's extraction prompt: a world fact per sentence of the ``<text>`` block,
    its capitalised words as entities, no dates and no causes.

    :param prompt: every message's text, joined.
    :param schema: the reply schema the request carried, if any (unused: the shape is fixed).
    """
    found = _TEXT.search(prompt)
    sentences = [s.strip() for s in _SENTENCE.findall(found["text"] if found else "") if s.strip()]
    return {"facts": [{"what": s, "when": "N/A", "where": "N/A", "who": "N/A", "why": "N/A",
                       "fact_kind": "conversation", "occurred_start": None, "occurred_end": None,
                       "fact_type": "world", "entities": re.findall(r"\b[A-Z][a-z]+\b", s)} for s in sentences]}


def answer_for(prompt: str, schema: Mapping[str, Any] | None) -> dict[str, Any]:
    """The stand-in's reply object to reflect's prompt: answer, cited ids, structured output if asked for
    (or to retain's extraction prompt, recognised by the ``facts`` its schema asks for: :func:`facts_for`).

    :param prompt: every message's text, joined.
    :param schema: the reply schema the request carried, if any.
    """
    if "facts" in (schema or {}).get("properties", {}):
        return facts_for(prompt, schema)
    memories = [json.loads(line) for line in prompt.splitlines() if _MEMORY_LINE.match(line)]
    cited = memories[:CITED]
    text = "From memory: " + " ".join(m["text"] for m in cited) if cited else "I do not remember anything about that."
    reply: dict[str, Any] = {"answer": text, "memory_ids": [m["id"] for m in cited]}
    wanted = (schema or {}).get("properties", {}).get("structured_output")
    if wanted is None and _SCHEMA_HEAD in prompt:
        wanted = json.loads(prompt.split(_SCHEMA_HEAD, 1)[1].strip().splitlines()[0])
    if wanted is not None:
        reply["structured_output"] = instance_of(wanted)
    return reply


def _pieces(text: str, count: int = 3) -> list[str]:
    size = max(1, -(-len(text) // count))
    return [text[i:i + size] for i in range(0, len(text), size)] or [""]


def sse(events: Sequence[tuple[str | None, Any]], done: bool = False) -> bytes:
    """Server-sent events: ``event:`` lines where named, ``data:`` as JSON, ``[DONE]`` at the end if asked."""
    out = []
    for name, data in events:
        out.append((f"event: {name}\n" if name else "") + f"data: {json.dumps(data)}\n\n")
    if done:
        out.append("data: [DONE]\n\n")
    return "".join(out).encode()


SSE_HEADERS = {"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}


def openai_routes(*, api_key: str | None = None, path: str = "/v1/chat/completions", model: str = "stub-model",
                  answer: Any = answer_for) -> Routes:
    """OpenAI chat completions: ``POST /v1/chat/completions``, JSON or ``stream: true`` events.

    :param api_key: the Bearer token (or Azure ``api-key``) to require, or ``None`` for none.
    :param path: where to serve it.
    :param model: the model the replies name.
    :param answer: builds the reply object from the prompt and the requested schema.
    """

    def complete(request: Request) -> Reply:
        headers = request.headers
        if api_key is not None and api_key not in (headers.get("authorization", "").removeprefix("Bearer "),
                                                   headers.get("api-key")):
            return Reply(401, {"error": {"message": "Incorrect API key provided", "type": "invalid_request_error"}})
        body = request.body
        problem = None if isinstance(body, dict) else "body must be a JSON object"
        if problem is None and (not isinstance(body.get("model"), str) or not isinstance(body.get("messages"), list)):
            problem = "model and messages are required"
        if problem:
            return Reply(400, {"error": {"message": problem, "type": "invalid_request_error"}})
        fmt = body.get("response_format") or {}
        schema = (fmt.get("json_schema") or {}).get("schema") if fmt.get("type") == "json_schema" else None
        prompt = "\n".join(str(m.get("content", "")) for m in body["messages"])
        content = json.dumps(answer(prompt, schema))
        usage = {"prompt_tokens": len(prompt.split()), "completion_tokens": len(content.split()),
                 "total_tokens": len(prompt.split()) + len(content.split()),
                 "prompt_tokens_details": {"cached_tokens": 0}}
        if body.get("stream"):
            chunks: list[tuple[str | None, Any]] = [
                (None, {"id": "chatcmpl-stub", "object": "chat.completion.chunk", "model": model,
                        "choices": [{"index": 0, "delta": {"role": "assistant", "content": piece},
                                     "finish_reason": None}]}) for piece in _pieces(content)]
            chunks.append((None, {"id": "chatcmpl-stub", "object": "chat.completion.chunk", "model": model,
                                  "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}))
            if (body.get("stream_options") or {}).get("include_usage"):
                chunks.append((None, {"id": "chatcmpl-stub", "object": "chat.completion.chunk", "model": model,
                                      "choices": [], "usage": usage}))
            return Reply(raw=sse(chunks, done=True), headers=SSE_HEADERS)
        return Reply(body={"id": "chatcmpl-stub", "object": "chat.completion", "model": model,
                           "choices": [{"index": 0, "message": {"role": "assistant", "content": content},
                                        "finish_reason": "stop"}], "usage": usage})

    return {("POST", path): complete}


#: the API key :func:`stand_in_model` asks for
STAND_IN_KEY = "sk-stand-in-key-1234567890"


@contextlib.contextmanager
def stand_in_model() -> Iterator[FixtureServer]:
    """An OpenAI-speaking chat model on 127.0.0.1 that wants :data:`STAND_IN_KEY`, until the block ends."""
    with FixtureServer(openai_routes(api_key=STAND_IN_KEY)) as server:
        yield server


def stand_in_settings(server: FixtureServer, **overrides: Any) -> dict[str, Any]:
    """Settings overrides that point the ``LLM_*`` settings at ``server`` (a :func:`stand_in_model`): no retry
    and a 5-second limit unless ``overrides`` say otherwise."""
    return {"llm_provider": "openai", "llm_api_key": STAND_IN_KEY, "llm_model": "stub-model",
            "llm_base_url": server.url + "/v1", "llm_max_retries": 0, "llm_timeout": 5.0, **overrides}


def fact(what: str, **fields: Any) -> dict[str, Any]:
    """One fact of retain's extraction reply: ``what`` with upstream's fields at their emptiest, and ``fields``."""
    return {"what": what, "when": "N/A", "where": "N/A", "who": "N/A", "why": "N/A", "fact_kind": "conversation",
            "occurred_start": None, "occurred_end": None, "fact_type": "world", "entities": [], **fields}


def facts_reply(*facts: dict[str, Any]) -> Reply:
    """The OpenAI reply that carries ``facts`` (see :func:`fact`) as retain's extraction."""
    return openai_reply(json.dumps({"facts": list(facts)}))


def openai_reply(content: str, *, finish_reason: str = "stop", status: int = 200, delay: float = 0.0) -> Reply:
    """One scripted chat-completions reply whose message content is ``content``, sent after ``delay`` seconds."""
    return Reply(status, {"id": "chatcmpl-stub", "object": "chat.completion", "model": "stub-model",
                          "choices": [{"index": 0, "message": {"role": "assistant", "content": content},
                                       "finish_reason": finish_reason}],
                          "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}}, delay=delay)


def _text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    return "\n".join(str(b.get("text", "")) for b in content or () if isinstance(b, dict))


def anthropic_routes(*, api_key: str | None = None, model: str = "claude-stub", answer: Any = answer_for) -> Routes:
    """Anthropic Messages: ``POST /v1/messages``; a forced tool's ``input`` carries a JSON reply.

    :param api_key: the ``x-api-key`` to require, or ``None`` for none.
    :param model: the model the replies name.
    :param answer: builds the reply object from the prompt and the requested schema.
    """

    def error(status: int, kind: str, message: str) -> Reply:
        return Reply(status, {"type": "error", "error": {"type": kind, "message": message}})

    def messages(request: Request) -> Reply:
        if api_key is not None and request.headers.get("x-api-key") != api_key:
            return error(401, "authentication_error", "invalid x-api-key")
        if not request.headers.get("anthropic-version"):
            return error(400, "invalid_request_error", "anthropic-version: header is required")
        body = request.body
        if not isinstance(body, dict) or not isinstance(body.get("max_tokens"), int) \
                or not isinstance(body.get("messages"), list) or not isinstance(body.get("model"), str):
            return error(400, "invalid_request_error", "model, max_tokens and messages are required")
        if any(m.get("role") not in ("user", "assistant") for m in body["messages"]):
            return error(400, "invalid_request_error", "messages: roles must be user or assistant")
        tools = body.get("tools") or []
        choice = body.get("tool_choice") or {}
        tool = next((t for t in tools if t.get("name") == choice.get("name")), None) \
            if choice.get("type") == "tool" else None
        prompt = "\n".join([_text_of(body.get("system")), *(_text_of(m.get("content")) for m in body["messages"])])
        reply = answer(prompt, tool["input_schema"] if tool else None)
        usage = {"input_tokens": len(prompt.split()), "output_tokens": len(json.dumps(reply).split())}
        block: dict[str, Any] = ({"type": "tool_use", "id": "toolu_stub", "name": tool["name"], "input": reply}
                                 if tool else {"type": "text", "text": json.dumps(reply)})
        stop = "tool_use" if tool else "end_turn"
        if not body.get("stream"):
            return Reply(body={"id": "msg_stub", "type": "message", "role": "assistant", "model": model,
                               "content": [block], "stop_reason": stop, "stop_sequence": None, "usage": usage})
        start = {**block, "input": {}} if tool else {"type": "text", "text": ""}
        kind, key = ("input_json_delta", "partial_json") if tool else ("text_delta", "text")
        events: list[tuple[str | None, Any]] = [
            ("message_start", {"type": "message_start", "message": {
                "id": "msg_stub", "type": "message", "role": "assistant", "model": model, "content": [],
                "stop_reason": None, "usage": {"input_tokens": usage["input_tokens"], "output_tokens": 1}}}),
            ("content_block_start", {"type": "content_block_start", "index": 0, "content_block": start}),
            ("ping", {"type": "ping"}),
            *(("content_block_delta", {"type": "content_block_delta", "index": 0, "delta": {"type": kind, key: p}})
              for p in _pieces(json.dumps(reply))),
            ("content_block_stop", {"type": "content_block_stop", "index": 0}),
            ("message_delta", {"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": None},
                               "usage": {"output_tokens": usage["output_tokens"]}}),
            ("message_stop", {"type": "message_stop"}),
        ]
        return Reply(raw=sse(events), headers=SSE_HEADERS)

    return {("POST", "/v1/messages"): messages}


def gemini_routes(*, api_key: str | None = None, model: str = "gemini-stub", answer: Any = answer_for) -> Routes:
    """Gemini: ``POST /v1beta/models/{model}:generateContent`` and ``:streamGenerateContent?alt=sse``.

    :param api_key: the ``x-goog-api-key`` to require, or ``None`` for none.
    :param model: the model served (the path names it).
    :param answer: builds the reply object from the prompt and the requested schema.
    """

    def error(status: int, state: str, message: str) -> Reply:
        return Reply(status, {"error": {"code": status, "message": message, "status": state}})

    def reply_of(request: Request) -> tuple[Reply | None, list[str], dict[str, int]]:
        if api_key is not None and request.headers.get("x-goog-api-key") != api_key:
            return error(403, "PERMISSION_DENIED", "API key not valid."), [], {}
        body = request.body
        if not isinstance(body, dict) or not isinstance(body.get("contents"), list):
            return error(400, "INVALID_ARGUMENT", "contents is required"), [], {}
        if any(c.get("role") not in ("user", "model") for c in body["contents"]):
            return error(400, "INVALID_ARGUMENT", "contents: role must be user or model"), [], {}
        config = body.get("generationConfig") or {}
        texts = [p.get("text", "") for c in [body.get("systemInstruction") or {}, *body["contents"]]
                 for p in c.get("parts", ())]
        prompt = "\n".join(texts)
        schema = config.get("responseJsonSchema") if config.get("responseMimeType") == "application/json" else None
        content = json.dumps(answer(prompt, schema))
        usage = {"promptTokenCount": len(prompt.split()), "candidatesTokenCount": len(content.split()),
                 "totalTokenCount": len(prompt.split()) + len(content.split())}
        return None, _pieces(content), usage

    def generate(request: Request) -> Reply:
        failed, pieces, usage = reply_of(request)
        if failed:
            return failed
        return Reply(body={"candidates": [{"content": {"role": "model", "parts": [{"text": "".join(pieces)}]},
                                           "finishReason": "STOP", "index": 0}],
                           "usageMetadata": usage, "modelVersion": model})

    def stream(request: Request) -> Reply:
        failed, pieces, usage = reply_of(request)
        if failed:
            return failed
        events: list[tuple[str | None, Any]] = [
            (None, {"candidates": [{"content": {"role": "model", "parts": [{"text": p}]}, "index": 0,
                                    **({"finishReason": "STOP"} if i == len(pieces) - 1 else {})}],
                    "usageMetadata": usage if i == len(pieces) - 1 else {"promptTokenCount": usage["promptTokenCount"]},
                    "modelVersion": model})
            for i, p in enumerate(pieces)]
        return Reply(raw=sse(events), headers=SSE_HEADERS)

    base = f"/v1beta/models/{model}"
    return {("POST", f"{base}:generateContent"): generate, ("POST", f"{base}:streamGenerateContent"): stream}
