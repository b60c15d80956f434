#!/usr/bin/env python3
"""Validates request bodies the SDK sent against each provider's published schemas.

    target/sdk-venv/bin/python emulator/sdk/wire_schemas.py CAPTURES.json [--table]

CAPTURES.json (written by tests/it/wire_schemas.rs) is `{"entries": [...]}`, each entry one
case in one wire format:

    {"case": "...", "format": "openai" | "azure" | "anthropic" | "gemini",
     "kind": "chat" | "transcription", "stream": false,
     "outcome": "sent", "path": "/...", "query": "api-version=..." | null, "status": 200,
     "body": {...}}                                  # a chat body as sent
     "form": [{"name", "file_name", "content_type", "text" | "size"}]   # a multipart upload
    {"case": "...", "format": "...", "outcome": "refused", "refused": "Unsupported: ..."}

It prints `{"results": [...]}` on stdout: for each entry its `verdict` (`valid`, `invalid`, or
`refused before sending: KIND`) and every check that applied with the errors it found (`path`,
`rule`, `message`). `--table` prints a human-readable table instead. The exit status is 0 when
every entry was checked (whatever the verdicts: the caller asserts them), 2 when a package is
missing, 1 on bad input.

What each format is checked against (the schemas are vendored under schemas/, see
schemas/extract.py for their sources and commits; the SDKs are pinned in requirements.txt):

- openai: OpenAI's OpenAPI spec (`CreateChatCompletionRequest`, `CreateTranscriptionRequest`)
  with jsonschema; openai-python's request TypedDicts with pydantic, unknown keys refused;
  the rules the spec states in prose only.
- azure: Azure OpenAI's 2024-10-21 inference spec (`createChatCompletionRequest`,
  `createTranscriptionRequest`) with jsonschema; top-level fields that spec does not declare;
  the rules it states in prose only.
- anthropic: anthropic-python's `MessageCreateParams` TypedDicts with pydantic, unknown keys
  refused; the documented ranges and patterns the TypedDicts do not encode.
- gemini: google-genai's pydantic models (which refuse unknown keys) for each part of the REST
  body; the v1beta rules they do not encode.
"""

from __future__ import annotations

import argparse
import copy
import json
import math
import re
import sys
import typing
from pathlib import Path

HERE = Path(__file__).resolve().parent
SCHEMAS = HERE / "schemas"

try:
    import jsonschema
    import typing_extensions
    from anthropic.types import message_create_params as anthropic_params
    from google.genai import types as genai
    from openai.types.audio import transcription_create_params as openai_audio
    from openai.types.chat import completion_create_params as openai_chat
    from pydantic import ConfigDict, TypeAdapter, ValidationError
except ImportError as e:  # pragma: no cover - the setup's fault, said plainly
    print(
        f"wire_schemas.py: {e}: install emulator/sdk/requirements.txt "
        "(scripts/test does, into target/sdk-venv)",
        file=sys.stderr,
    )
    sys.exit(2)


# --------------------------------------------------------------------------------------------
# Errors as the report lists them.


def err(path: str, rule: str, message: str) -> dict:
    return {"path": path, "rule": rule, "message": message}


def json_path(parts) -> str:
    out = "$"
    for p in parts:
        out += f"[{p}]" if isinstance(p, int) else f".{p}"
    return out


def short(value: object, limit: int = 120) -> str:
    text = json.dumps(value, ensure_ascii=False) if not isinstance(value, str) else repr(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"


# --------------------------------------------------------------------------------------------
# OpenAPI component subsets (schemas/*.json) as JSON Schema 2020-12.

OPENAPI_REF = "#/components/schemas/"
SCHEMA_MAPS = {"properties", "patternProperties", "$defs", "definitions", "dependentSchemas"}
SCHEMA_ONE = {
    "items",
    "additionalProperties",
    "not",
    "if",
    "then",
    "else",
    "contains",
    "propertyNames",
    "unevaluatedProperties",
    "unevaluatedItems",
}
SCHEMA_LISTS = {"allOf", "anyOf", "oneOf", "prefixItems"}


def to_json_schema(node: object) -> object:
    """One OpenAPI schema object as JSON Schema: `nullable: true` becomes `anyOf [it, null]`
    (OpenAPI 3.0.3 §4.7.25, kept by OpenAI's 3.1 document too), references point into `$defs`,
    `discriminator` (an OpenAPI annotation) goes."""
    if not isinstance(node, dict):
        return node
    out: dict = {}
    nullable = False
    for key, value in node.items():
        if key == "nullable":
            nullable = value is True
        elif key == "discriminator":
            continue
        elif key == "$ref" and isinstance(value, str) and value.startswith(OPENAPI_REF):
            out[key] = "#/$defs/" + value[len(OPENAPI_REF) :]
        elif key in SCHEMA_MAPS and isinstance(value, dict):
            out[key] = {name: to_json_schema(sub) for name, sub in value.items()}
        elif key in SCHEMA_ONE:
            out[key] = to_json_schema(value)
        elif key in SCHEMA_LISTS and isinstance(value, list):
            out[key] = [to_json_schema(sub) for sub in value]
        else:
            out[key] = value
    if nullable:
        return {"anyOf": [out, {"type": "null"}]}
    return out


# Errata: where a vendored spec contradicts its own provider's documentation of the same
# version, the documentation wins — narrowly, one keyword at one place, each with its source,
# and each checked to still be what the vendored file says (a re-vendored spec that fixed it
# fails here, so the erratum goes). Applied before validating; `controls` in the Rust test
# feed the validator a body each erratum must still refuse.
ERRATA = {
    "azure-2024-10-21.json": [
        {
            # The 2024-10-21 spec's ResponseFormatJsonSchema lists `required: ["type", "name"]`
            # for the `json_schema` object, whose properties are description, name, schema and
            # strict — `type` is not one of them. Microsoft's REST example for this very
            # api-version sends `{"type": "json_schema", "json_schema": {"name", "strict",
            # "schema"}}`, no `type` inside (MicrosoftDocs/azure-ai-docs,
            # articles/ai-services/openai/includes/structured-outputs-rest.md, "curl -X POST
            # …/chat/completions?api-version=2024-10-21"), as openai-python's AzureOpenAI and
            # OpenAI's own spec (`required: [name]`) do.
            "schema": "ResponseFormatJsonSchema",
            "path": ["properties", "json_schema", "required"],
            "spec_says": ["type", "name"],
            "documented": ["name"],
            "source": "https://learn.microsoft.com/en-us/azure/ai-services/openai/how-to/"
            "structured-outputs (REST, api-version=2024-10-21)",
        }
    ]
}


def apply_errata(file_name: str, components: dict) -> None:
    for e in ERRATA.get(file_name, []):
        node = components[e["schema"]]
        for key in e["path"][:-1]:
            node = node[key]
        last = e["path"][-1]
        if node.get(last) != e["spec_says"]:
            raise SystemExit(
                f"erratum for {file_name} {e['schema']}.{'.'.join(e['path'])} no longer applies: "
                f"the spec says {node.get(last)!r}, not {e['spec_says']!r}; drop the erratum"
            )
        node[last] = e["documented"]


class OpenApiSubset:
    """A vendored subset: its source and a validator per root schema."""

    def __init__(self, file_name: str):
        doc = json.loads((SCHEMAS / file_name).read_text(encoding="utf-8"))
        self.source = doc["x-source"]
        components = doc["components"]["schemas"]
        apply_errata(file_name, components)
        self.declared = components  # raw, for the declared-field check
        self.defs = {name: to_json_schema(s) for name, s in components.items()}
        self._validators: dict = {}

    def label(self, root: str) -> str:
        return f"{self.source['repository']}@{self.source['commit'][:12]} {root}"

    def validator(self, root: str):
        if root not in self._validators:
            schema = {
                "$schema": "https://json-schema.org/draft/2020-12/schema",
                "$defs": self.defs,
                "$ref": f"#/$defs/{root}",
            }
            jsonschema.Draft202012Validator.check_schema(schema)
            self._validators[root] = jsonschema.Draft202012Validator(schema)
        return self._validators[root]

    def check(self, root: str, instance: object) -> list[dict]:
        found = []
        for e in sorted(self.validator(root).iter_errors(instance), key=lambda e: list(e.path)):
            d = describe(e)
            if d not in found:  # a field both halves of an `allOf` declare fails twice
                found.append(d)
        return found

    def properties(self, root: str) -> set[str]:
        """Every property a root object declares, through its `allOf` and references."""
        names: set[str] = set()

        def walk(s: object) -> None:
            if not isinstance(s, dict):
                return
            ref = s.get("$ref")
            if isinstance(ref, str) and ref.startswith(OPENAPI_REF):
                walk(self.declared.get(ref[len(OPENAPI_REF) :]))
            names.update((s.get("properties") or {}).keys())
            for sub in s.get("allOf") or []:
                walk(sub)

        walk(self.declared[root])
        return names


def by_branch(context: list) -> list:
    """A failed `oneOf`/`anyOf`'s errors, one list per alternative."""
    branches: dict = {}
    for c in context:
        branches.setdefault(c.relative_schema_path[0], []).append(c)
    return list(branches.values())


def elsewhere(errors: list) -> bool:
    """Whether an alternative was refused for being meant for another value: another type,
    another tag (`role`, `type`), or only such alternatives of its own."""
    for x in errors:
        if x.validator == "type" and not x.relative_path:
            return True
        if x.validator in ("enum", "const") and len(x.relative_path) == 1:
            return True
        if x.validator in ("oneOf", "anyOf") and not x.relative_path and x.context:
            if all(elsewhere(b) for b in by_branch(x.context)):
                return True
    return False


def describe(e: "jsonschema.ValidationError", via: str = "") -> dict:
    """A jsonschema error; for a failed `oneOf`/`anyOf`, the reason of the alternative the
    value was meant for (recursively): alternatives refused for the value's type, or for a tag
    (`role`, `type`) of another value, are left out when another one remains."""
    rule = f"{via}{e.validator}"
    if e.validator in ("oneOf", "anyOf") and e.context:
        branches = by_branch(e.context)
        meant = [b for b in branches if not elsewhere(b)] or branches
        if len(meant) == 1 or e.validator == "anyOf" or len(meant) < len(branches):
            best = min(meant, key=len)
            inner = min(best, key=lambda x: (-len(x.absolute_path), str(x.validator)))
            if inner.validator in ("oneOf", "anyOf") and inner.context:
                return describe(inner, f"{rule} → ")
            return err(json_path(inner.absolute_path), f"{rule} → {inner.validator}", inner.message)
    return err(json_path(e.absolute_path), rule, e.message)


# --------------------------------------------------------------------------------------------
# pydantic over TypedDicts, unknown keys refused.


def forbid_extra(tp: object, seen: set) -> None:
    """Sets `extra='forbid'` on every TypedDict reachable from `tp` (pydantic reads a
    TypedDict's `__pydantic_config__`; `TypeAdapter(config=…)` is refused for TypedDicts)."""
    if id(tp) in seen:
        return
    seen.add(id(tp))
    if typing_extensions.is_typeddict(tp):
        # arbitrary types: a file field is typed `IO[bytes] | bytes | …`.
        tp.__pydantic_config__ = ConfigDict(extra="forbid", arbitrary_types_allowed=True)  # type: ignore[attr-defined]
        for hint in typing.get_type_hints(tp, include_extras=True).values():
            forbid_extra(hint, seen)
        return
    for arg in typing.get_args(tp):
        forbid_extra(arg, seen)


class Lazy(Exception):
    """A validation error raised while an `Iterable[...]` field was read, and where it was."""

    def __init__(self, loc: tuple, error: "ValidationError"):
        super().__init__(str(error))
        self.loc = loc
        self.error = error


def materialize(value: object, loc: tuple = ()) -> object:
    """Consumes what pydantic validates lazily (an `Iterable[...]` field is a generator that
    validates as it is read), so its items' errors surface, with the field's place."""
    if isinstance(value, dict):
        return {k: materialize(v, loc + (k,)) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [materialize(v, loc + (i,)) for i, v in enumerate(value)]
    if isinstance(value, (str, bytes, int, float, bool)) or value is None:
        return value
    if hasattr(value, "__iter__") and hasattr(value, "__next__"):
        try:
            items = list(value)
        except ValidationError as e:
            raise Lazy(loc, e) from None
        return [materialize(v, loc + (i,)) for i, v in enumerate(items)]
    return value


class Strict:
    """A pydantic TypeAdapter over a TypedDict whose every nested TypedDict refuses unknown
    keys."""

    def __init__(self, tp: object, label: str):
        forbid_extra(tp, set())
        self.adapter = TypeAdapter(tp)
        self.label = label

    def check(self, instance: object) -> list[dict]:
        try:
            materialize(self.adapter.validate_python(instance))
        except ValidationError as e:
            return pydantic_errors(e, instance)
        except Lazy as lazy:
            return pydantic_errors(lazy.error, instance, lazy.loc)
        return []


def pydantic_errors(e: "ValidationError", instance: object, prefix: tuple = ()) -> list[dict]:
    """pydantic's errors at the body's own paths. A union reports every member it tried; the
    members meant for another value (another `role` or `type` tag, another type) are left out
    when one remains that was meant for it, as describe() does for jsonschema."""
    raw = []
    for d in e.errors():
        loc = tuple(prefix) + tuple(d.get("loc", ()))
        path: list = []
        chain: list = []  # the union members on the way: (the member's place, its tag)
        node = instance
        for i, p in enumerate(loc):
            tag_like = isinstance(p, str) and ("[" in p or p.startswith("function-"))
            if isinstance(node, dict) and isinstance(p, str) and not tag_like and (p in node or i == len(loc) - 1):
                path.append(p)
                node = node.get(p)
            elif isinstance(node, list) and isinstance(p, int):
                path.append(p)
                node = node[p] if 0 <= p < len(node) else None
            else:
                chain.append((tuple(path), p))
        raw.append((path, tuple(chain), d))
    members: dict = {}
    for path, chain, d in raw:
        for k in range(len(chain)):
            m = members.setdefault(chain[: k + 1], {"point": (chain[:k], chain[k][0]), "wrong": False})
            rel = path[len(chain[k][0]) :]
            kind = d.get("type", "")
            another_tag = kind == "literal_error" and len(rel) == 1 and rel[0] in ("role", "type")
            another_type = not rel and (kind.endswith("_type") or kind == "literal_error")
            if another_tag or another_type:
                m["wrong"] = True
    points: dict = {}
    for m in members.values():
        points.setdefault(m["point"], []).append(m["wrong"])

    def elsewhere(chain: tuple) -> bool:
        for k in range(len(chain)):
            m = members[chain[: k + 1]]
            if m["wrong"] and not all(points[m["point"]]):
                return True
        return False

    out, seen = [], set()
    for path, chain, d in raw:
        if elsewhere(chain):
            continue
        o = err(json_path(path), d.get("type", "?"), d.get("msg", ""))
        k = (o["path"], o["rule"], o["message"])
        if k not in seen:
            seen.add(k)
            out.append(o)
    return out


# --------------------------------------------------------------------------------------------
# The prose rules: what the providers document but their schemas and types do not encode.

NAME_64 = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
ANTHROPIC_ID = re.compile(r"^[a-zA-Z0-9_-]+$")


def openai_prose_rules(body: dict, doc: str) -> list[dict]:
    """OpenAI's and Azure's specs say in `description` only (so no jsonschema keyword checks
    them): a function's `name` and a `json_schema`'s `name` "Must be a-z, A-Z, 0-9, or contain
    underscores and dashes, with a maximum length of 64"; "A max of 128 functions are
    supported" in `tools`. `doc` is the reference page that says it."""
    found = []
    for i, tool in enumerate(body.get("tools") or []):
        name = ((tool or {}).get("function") or {}).get("name")
        if isinstance(name, str) and not NAME_64.match(name):
            found.append(
                err(f"$.tools[{i}].function.name", "name ^[a-zA-Z0-9_-]{1,64}$", f"{short(name)} ({doc})")
            )
    tools = body.get("tools")
    if isinstance(tools, list) and len(tools) > 128:
        found.append(err("$.tools", "at most 128 functions", f"{len(tools)} tools ({doc})"))
    fmt = body.get("response_format")
    if isinstance(fmt, dict) and fmt.get("type") == "json_schema":
        name = (fmt.get("json_schema") or {}).get("name")
        if isinstance(name, str) and not NAME_64.match(name):
            found.append(
                err(
                    "$.response_format.json_schema.name",
                    "name ^[a-zA-Z0-9_-]{1,64}$",
                    f"{short(name)} ({doc})",
                )
            )
    return found


# https://platform.openai.com/docs/api-reference/chat/create (tools[].function.name,
# response_format.json_schema.name, tools: "A max of 128 functions are supported").
OPENAI_DOC = "https://platform.openai.com/docs/api-reference/chat/create"
# https://learn.microsoft.com/en-us/azure/ai-services/openai/reference#chat-completions — the
# same sentences in the 2024-10-21 spec's descriptions of FunctionObject.name and
# ResponseFormatJsonSchema.json_schema.name.
AZURE_DOC = "https://learn.microsoft.com/en-us/azure/ai-services/openai/reference#chat-completions"

# https://docs.anthropic.com/en/api/messages: `temperature` "Ranges from 0.0 to 1.0", `top_p`
# (nucleus sampling, a probability: 0 to 1), `top_k` ("Only sample from the top K options", a
# non-negative integer), `max_tokens` at least 1 (0 only pre-warms the prompt cache, per
# anthropic-python's own docstring, and is never what the SDK means). anthropic-python 1.0
# (2026-08-20) dropped these three sampling fields from its types while the API still takes
# them (sent through `extra_body`; simonw/llm-anthropic#82 records the change), so they are
# checked here and taken out before the TypedDict check.
ANTHROPIC_DOC = "https://docs.anthropic.com/en/api/messages"
ANTHROPIC_SAMPLING = ("temperature", "top_p", "top_k")
# https://docs.anthropic.com/en/docs/agents-and-tools/tool-use/implement-tool-use ("Specifying
# client tools": `name` "Must match the regex ^[a-zA-Z0-9_-]{1,64}$").
ANTHROPIC_TOOLS_DOC = "https://docs.anthropic.com/en/docs/agents-and-tools/tool-use/implement-tool-use"
# `tool_use.id` and `tool_result.tool_use_id` match ^[a-zA-Z0-9_-]+$: the API's own 400
# ("messages.N.content.M.tool_use.id: String should match pattern '^[a-zA-Z0-9_-]+$'", as
# reported in maximhq/bifrost#5097); the id fields of https://docs.anthropic.com/en/api/messages.


# What the API answers 400 to although anthropic-python's types let it through, in the API's
# own words as publicly reported: "stop_sequences: each stop sequence must contain
# non-whitespace" (BerriAI/litellm#3286) and "…must be non-empty" (MegaGrindStone/mcp-web-ui#5);
# "messages.N: all messages must have non-empty content except for the optional final
# assistant message" (anthropics/claude-code#3196). The fields: https://docs.anthropic.com/en/api/messages
ANTHROPIC_400 = "the API's 400 as reported publicly; fields of https://docs.anthropic.com/en/api/messages"


def anthropic_api_rules(body: dict) -> list[dict]:
    found = []
    for i, stop in enumerate(body.get("stop_sequences") or []):
        if isinstance(stop, str) and not stop.strip():
            found.append(err(f"$.stop_sequences[{i}]", "non-whitespace", f"{short(stop)} ({ANTHROPIC_400})"))
    messages = body.get("messages") or []
    for i, m in enumerate(messages):
        if not isinstance(m, dict):
            continue
        final_assistant = i == len(messages) - 1 and m.get("role") == "assistant"
        content = m.get("content")
        empty = content in ("", []) or (
            isinstance(content, list)
            and any(isinstance(b, dict) and b.get("type") == "text" and b.get("text") == "" for b in content)
        )
        if empty and not final_assistant:
            found.append(err(f"$.messages[{i}].content", "non-empty", f"{short(content)} ({ANTHROPIC_400})"))
    return found


def anthropic_rules(body: dict) -> list[dict]:
    found = []
    for field, lo, hi in (("temperature", 0.0, 1.0), ("top_p", 0.0, 1.0)):
        if field in body:
            v = body[field]
            if not isinstance(v, (int, float)) or isinstance(v, bool) or not math.isfinite(v) or not lo <= v <= hi:
                found.append(err(f"$.{field}", f"{lo} ≤ {field} ≤ {hi}", f"{short(v)} ({ANTHROPIC_DOC})"))
    if "top_k" in body:
        v = body["top_k"]
        if not isinstance(v, int) or isinstance(v, bool) or v < 0:
            found.append(err("$.top_k", "integer ≥ 0", f"{short(v)} ({ANTHROPIC_DOC})"))
    mt = body.get("max_tokens")
    if isinstance(mt, int) and mt < 1:
        found.append(err("$.max_tokens", "max_tokens ≥ 1", f"{mt} ({ANTHROPIC_DOC})"))
    for i, tool in enumerate(body.get("tools") or []):
        name = (tool or {}).get("name")
        if isinstance(name, str) and not NAME_64.match(name):
            found.append(err(f"$.tools[{i}].name", "name ^[a-zA-Z0-9_-]{1,64}$", f"{short(name)} ({ANTHROPIC_TOOLS_DOC})"))
    for i, m in enumerate(body.get("messages") or []):
        content = (m or {}).get("content")
        if not isinstance(content, list):
            continue
        for j, block in enumerate(content):
            if not isinstance(block, dict):
                continue
            for key in ("id", "tool_use_id"):
                if block.get("type") in ("tool_use", "tool_result") and key in block:
                    v = block[key]
                    if not isinstance(v, str) or not ANTHROPIC_ID.match(v):
                        found.append(
                            err(
                                f"$.messages[{i}].content[{j}].{key}",
                                "id ^[a-zA-Z0-9_-]+$",
                                f"{short(v)} ({ANTHROPIC_DOC})",
                            )
                        )
    return found


# https://ai.google.dev/api/generate-content#request-body: the fields of a
# GenerateContentRequest body (the model is in the path).
GEMINI_REQUEST_DOC = "https://ai.google.dev/api/generate-content#request-body"
GEMINI_FIELDS = {
    "contents",
    "tools",
    "toolConfig",
    "safetySettings",
    "systemInstruction",
    "generationConfig",
    "cachedContent",
}
# https://ai.google.dev/api/caching#FunctionDeclaration: `description` "Required. A brief
# description of the function."; `parameters` and `parametersJsonSchema` are exclusive.
GEMINI_FUNCTION_DOC = "https://ai.google.dev/api/caching#FunctionDeclaration"
# https://ai.google.dev/api/generate-content#generationconfig: `stopSequences` "The set of
# character sequences (up to 5)"; `temperature` "Values can range from [0.0, 2.0]"; `topP`
# and `topK` as probabilities and counts.
GEMINI_CONFIG_DOC = "https://ai.google.dev/api/generate-content#generationconfig"
# https://ai.google.dev/api/caching#Content: `role` "Must be either 'user' or 'model'";
# https://ai.google.dev/api/caching#Part: "Union field data can be only one of" text,
# inlineData, functionCall, functionResponse, fileData, executableCode, codeExecutionResult.
GEMINI_CONTENT_DOC = "https://ai.google.dev/api/caching#Content"
GEMINI_PART_DOC = "https://ai.google.dev/api/caching#Part"
GEMINI_PART_DATA = (
    "text",
    "inlineData",
    "functionCall",
    "functionResponse",
    "fileData",
    "executableCode",
    "codeExecutionResult",
)


def gemini_rules(body: dict) -> list[dict]:
    found = []
    for key in body:
        if key not in GEMINI_FIELDS:
            found.append(err(f"$.{key}", "GenerateContentRequest field", f"not a request field ({GEMINI_REQUEST_DOC})"))
    contents = body.get("contents")
    if not isinstance(contents, list) or not contents:
        found.append(err("$.contents", "required, non-empty", f"{short(contents)} ({GEMINI_REQUEST_DOC})"))
        contents = []
    for i, c in enumerate(contents):
        role = (c or {}).get("role")
        if role not in ("user", "model"):
            found.append(err(f"$.contents[{i}].role", "user or model", f"{short(role)} ({GEMINI_CONTENT_DOC})"))
    where = [(f"$.contents[{i}]", c) for i, c in enumerate(contents)]
    if isinstance(body.get("systemInstruction"), dict):
        where.append(("$.systemInstruction", body["systemInstruction"]))
    for path, c in where:
        for j, part in enumerate((c or {}).get("parts") or []):
            data = [k for k in GEMINI_PART_DATA if isinstance(part, dict) and k in part]
            if len(data) != 1:
                found.append(
                    err(f"{path}.parts[{j}]", "exactly one data field", f"has {data or 'none'} ({GEMINI_PART_DOC})")
                )
    for i, tool in enumerate(body.get("tools") or []):
        for j, fd in enumerate((tool or {}).get("functionDeclarations") or []):
            at = f"$.tools[{i}].functionDeclarations[{j}]"
            d = (fd or {}).get("description")
            if not isinstance(d, str) or not d.strip():
                found.append(err(f"{at}.description", "required", f"missing or blank ({GEMINI_FUNCTION_DOC})"))
            if "parameters" in (fd or {}) and "parametersJsonSchema" in (fd or {}):
                found.append(err(at, "parameters xor parametersJsonSchema", f"both set ({GEMINI_FUNCTION_DOC})"))
    cfg = body.get("generationConfig") or {}
    stops = cfg.get("stopSequences")
    if isinstance(stops, list) and len(stops) > 5:
        found.append(err("$.generationConfig.stopSequences", "at most 5", f"{len(stops)} sequences ({GEMINI_CONFIG_DOC})"))
    t = cfg.get("temperature")
    if isinstance(t, (int, float)) and not 0.0 <= t <= 2.0:
        found.append(err("$.generationConfig.temperature", "0.0 ≤ temperature ≤ 2.0", f"{t} ({GEMINI_CONFIG_DOC})"))
    p = cfg.get("topP")
    if isinstance(p, (int, float)) and not 0.0 <= p <= 1.0:
        found.append(err("$.generationConfig.topP", "0.0 ≤ topP ≤ 1.0", f"{p} ({GEMINI_CONFIG_DOC})"))
    return found


# --------------------------------------------------------------------------------------------
# The checks of each format.


class Checks:
    def __init__(self) -> None:
        self.openai = OpenApiSubset("openai-openapi.json")
        self.azure = OpenApiSubset("azure-2024-10-21.json")
        self.openai_chat = {
            False: Strict(openai_chat.CompletionCreateParamsNonStreaming, "openai-python CompletionCreateParamsNonStreaming"),
            True: Strict(openai_chat.CompletionCreateParamsStreaming, "openai-python CompletionCreateParamsStreaming"),
        }
        self.openai_audio = Strict(
            openai_audio.TranscriptionCreateParamsNonStreaming, "openai-python TranscriptionCreateParamsNonStreaming"
        )
        self.anthropic = {
            False: Strict(anthropic_params.MessageCreateParamsNonStreaming, "anthropic-python MessageCreateParamsNonStreaming"),
            True: Strict(anthropic_params.MessageCreateParamsStreaming, "anthropic-python MessageCreateParamsStreaming"),
        }
        self.genai = genai

    # Each returns [(check label, [errors])].

    def openai_chat_body(self, e: dict) -> list:
        body, stream = e["body"], bool(e.get("stream"))
        return [
            (self.openai.label("CreateChatCompletionRequest"), self.openai.check("CreateChatCompletionRequest", body)),
            (self.openai_chat[stream].label, self.openai_chat[stream].check(copy.deepcopy(body))),
            (f"prose rules of {OPENAI_DOC}", openai_prose_rules(body, OPENAI_DOC)),
        ]

    # The spec's objects do not say `additionalProperties: false`, so jsonschema alone takes
    # any extra field; the service does not: a field its api-version does not know is a 400
    # "Unrecognized request argument supplied: …" (what `stream_options` got before
    # 2024-09-01-preview, and why the SDK leaves it out at 2024-10-21). Hence the check of the
    # top-level fields against those the spec declares.
    def azure_chat_body(self, e: dict) -> list:
        body = e["body"]
        root = "createChatCompletionRequest"
        declared = self.azure.properties(root)
        undeclared = [
            err(f"$.{k}", "declared field", f"`{k}` is not a field of {root} at api-version 2024-10-21")
            for k in body
            if k not in declared and k not in AZURE_TOLERATED
        ]
        return [
            (self.azure.label(root), self.azure.check(root, body)),
            (f"{self.azure.label(root)}: declared top-level fields", undeclared + api_version(e)),
            (f"prose rules of {AZURE_DOC}", openai_prose_rules(body, AZURE_DOC)),
        ]

    def anthropic_body(self, e: dict) -> list:
        body, stream = e["body"], bool(e.get("stream"))
        typed = {k: v for k, v in copy.deepcopy(body).items() if k not in ANTHROPIC_SAMPLING}
        return [
            (self.anthropic[stream].label, self.anthropic[stream].check(typed)),
            (f"documented ranges and patterns ({ANTHROPIC_DOC})", anthropic_rules(body)),
            ("what the API refuses beyond its types", anthropic_api_rules(body)),
        ]

    def gemini_body(self, e: dict) -> list:
        g = self.genai
        body = e["body"]
        found = []
        parts = [
            ("contents", g.Content, True),
            ("systemInstruction", g.Content, False),
            ("tools", g.Tool, True),
            ("toolConfig", g.ToolConfig, False),
            ("generationConfig", g.GenerationConfig, False),
            ("safetySettings", g.SafetySetting, True),
        ]
        for key, model, many in parts:
            if key not in body:
                continue
            items = list(enumerate(body[key])) if many and isinstance(body[key], list) else [(None, body[key])]
            for i, item in items:
                at = f"$.{key}" if i is None else f"$.{key}[{i}]"
                try:
                    # JSON mode: camelCase aliases, and bytes fields (inlineData.data,
                    # thoughtSignature) read as base64, as the REST API reads them.
                    model.model_validate_json(json.dumps(item))
                except ValidationError as ve:
                    for o in pydantic_errors(ve, item):
                        o["path"] = at + o["path"][1:]
                        found.append(o)
        return [
            ("google-genai " + ", ".join(dict.fromkeys(m.__name__ for _, m, _ in parts)), found),
            ("v1beta rules (ai.google.dev/api)", gemini_rules(body)),
        ]

    def openai_transcription(self, e: dict) -> list:
        fields = form_fields(e, self.openai.declared["CreateTranscriptionRequest"])
        typed = dict(fields)
        if "file" in typed:
            typed["file"] = b"<audio>"
        return [
            (self.openai.label("CreateTranscriptionRequest"), self.openai.check("CreateTranscriptionRequest", fields)),
            (self.openai_audio.label, self.openai_audio.check(typed)),
            ("multipart file part", file_part(e)),
        ]

    def azure_transcription(self, e: dict) -> list:
        root = "createTranscriptionRequest"
        fields = form_fields(e, self.azure.declared[root])
        declared = self.azure.properties(root)
        undeclared = [
            err(f"$.{k}", "declared field", f"`{k}` is not a field of {root} at api-version 2024-10-21")
            for k in fields
            if k not in declared and k not in AZURE_TOLERATED
        ]
        return [
            (self.azure.label(root), self.azure.check(root, fields)),
            (f"{self.azure.label(root)}: declared fields", undeclared + api_version(e)),
            ("multipart file part", file_part(e)),
        ]

    def run(self, e: dict) -> list:
        key = (e.get("format"), e.get("kind", "chat"))
        handler = {
            ("openai", "chat"): self.openai_chat_body,
            ("azure", "chat"): self.azure_chat_body,
            ("anthropic", "chat"): self.anthropic_body,
            ("gemini", "chat"): self.gemini_body,
            ("openai", "transcription"): self.openai_transcription,
            ("azure", "transcription"): self.azure_transcription,
        }.get(key)
        if handler is None:
            return [("known format", [err("$", "format", f"no checks for {key}")])]
        return handler(e)


# `model` in an Azure body is not in the 2024-10-21 spec (the deployment is in the path), but
# openai-python's AzureOpenAI client sends it there itself (its `model` argument is the
# deployment), so the service takes it; it is not counted as undeclared.
AZURE_TOLERATED = {"model"}


def api_version(e: dict) -> list[dict]:
    query = e.get("query") or ""
    if "api-version=2024-10-21" in query.split("&"):
        return []
    return [err("?api-version", "2024-10-21", f"query was {short(query)}: these checks are for 2024-10-21")]


def form_fields(e: dict, schema: dict) -> dict:
    """A multipart upload's fields as the object its schema describes: the file as a
    placeholder string (`format: binary`), text fields typed as the schema types them."""
    props = schema.get("properties") or {}
    out: dict = {}
    for f in e.get("form") or []:
        name = f["name"]
        if f.get("file_name") is not None or "size" in f:
            out[name] = "<binary>"
            continue
        text = f.get("text", "")
        kind = (props.get(name) or {}).get("type")
        if kind == "number":
            try:
                out[name] = float(text)
            except ValueError:
                out[name] = text
        elif kind == "integer":
            try:
                out[name] = int(text)
            except ValueError:
                out[name] = text
        else:
            out[name] = text
    return out


def file_part(e: dict) -> list[dict]:
    """The audio goes as a file part with a file name (the API reads the format from it:
    https://platform.openai.com/docs/api-reference/audio/createTranscription, `file`)."""
    files = [f for f in e.get("form") or [] if f["name"] == "file"]
    if len(files) != 1:
        return [err("file", "one file part", f"{len(files)} parts named file")]
    f = files[0]
    found = []
    if not f.get("file_name"):
        found.append(err("file", "file name", "the file part has no filename"))
    if not f.get("size"):
        found.append(err("file", "bytes", "the file part is empty"))
    return found


# --------------------------------------------------------------------------------------------


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("captures", type=Path)
    ap.add_argument("--table", action="store_true", help="a readable table instead of JSON")
    args = ap.parse_args()
    try:
        entries = json.loads(args.captures.read_text(encoding="utf-8"))["entries"]
    except (OSError, ValueError, KeyError) as e:
        print(f"wire_schemas.py: cannot read {args.captures}: {e}", file=sys.stderr)
        return 1
    checks = Checks()
    results = []
    for e in entries:
        r = {k: e.get(k) for k in ("case", "format", "kind", "stream", "outcome", "status")}
        if e.get("outcome") == "refused":
            r["verdict"] = f"refused before sending: {e.get('refused')}"
            r["checks"] = []
        else:
            try:
                ran = checks.run(e)
            except Exception as x:  # a crash is a finding, never a pass
                ran = [("validator", [err("$", "crash", f"{type(x).__name__}: {x}")])]
            r["checks"] = [{"check": label, "errors": errors} for label, errors in ran]
            r["verdict"] = "invalid" if any(errors for _, errors in ran) else "valid"
        results.append(r)
    if args.table:
        print(table(results))
    else:
        json.dump({"results": results}, sys.stdout, indent=1, ensure_ascii=False)
        sys.stdout.write("\n")
    return 0


def table(results: list) -> str:
    lines = []
    for r in results:
        mode = " (stream)" if r.get("stream") else ""
        status = f" [emulator {r['status']}]" if r.get("status") is not None else ""
        lines.append(f"{r['case']} × {r['format']}{mode}: {r['verdict']}{status}")
        for c in r["checks"]:
            for x in c["errors"]:
                lines.append(f"    {c['check']}: {x['path']} {x['rule']}: {x['message']}")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
