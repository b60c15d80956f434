#!/usr/bin/env python3
"""Extracts the request schemas wire_schemas.py validates against from a provider's OpenAPI
document: the named root component schemas and every component schema reachable from them
through `$ref`, nothing else, with prose dropped.

    python3 emulator/sdk/schemas/extract.py openai  openapi.yaml   --commit SHA > emulator/sdk/schemas/openai-openapi.json
    python3 emulator/sdk/schemas/extract.py azure   inference.json --commit SHA > emulator/sdk/schemas/azure-2024-10-21.json

Sources (vendored so no test reaches the network; re-run this script to refresh them):

- openai: `openapi.yaml` of https://github.com/openai/openai-openapi (MIT), roots
  `CreateChatCompletionRequest` and `CreateTranscriptionRequest`.
- azure: `specification/cognitiveservices/data-plane/AzureOpenAI/inference/stable/2024-10-21/inference.json`
  of https://github.com/Azure/azure-rest-api-specs (MIT), roots `createChatCompletionRequest`
  and `createTranscriptionRequest`.

What is dropped is annotation only and changes no verdict: `description`, `example`,
`examples`, `title`, `externalDocs` and vendor extensions (`x-…`) wherever a schema (not a
property name) holds them. Everything that constrains a value — `type`, `enum`, `required`,
`minItems`/`maxItems`, `minimum`/`maximum`, `pattern`, `nullable`, `additionalProperties`,
`oneOf`/`anyOf`/`allOf`, `$ref`, `default`, `format`, `discriminator`, `deprecated` — is kept
as written. The output is the OpenAPI `components.schemas` subset, still in OpenAPI's dialect
(`nullable`, `#/components/schemas/…` references); wire_schemas.py turns it into JSON Schema
when it loads it.

Reading YAML needs PyYAML (`pip install pyyaml`); JSON needs nothing.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

SOURCES = {
    "openai": {
        "repository": "https://github.com/openai/openai-openapi",
        "path": "openapi.yaml",
        "license": "MIT (Copyright (c) OpenAI), the repository's LICENSE",
        "roots": ["CreateChatCompletionRequest", "CreateTranscriptionRequest"],
    },
    "azure": {
        "repository": "https://github.com/Azure/azure-rest-api-specs",
        "path": "specification/cognitiveservices/data-plane/AzureOpenAI/inference/stable/2024-10-21/inference.json",
        "license": "MIT (Copyright (c) Microsoft Corporation), the repository's LICENSE",
        "roots": ["createChatCompletionRequest", "createTranscriptionRequest"],
    },
}

REF_PREFIX = "#/components/schemas/"

# Keys that only annotate a schema.
ANNOTATIONS = {"description", "example", "examples", "title", "externalDocs"}
# Keywords whose value is a map from names to schemas.
SCHEMA_MAPS = {"properties", "patternProperties", "definitions", "$defs", "dependentSchemas"}
# Keywords whose value is one schema (or a boolean).
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
    "additionalItems",
}
# Keywords whose value is a list of schemas.
SCHEMA_LISTS = {"allOf", "anyOf", "oneOf", "prefixItems"}


def strip(schema: object) -> object:
    """`schema` without its annotations, walking only schema positions."""
    if not isinstance(schema, dict):
        return schema
    out = {}
    for key, value in schema.items():
        if key in ANNOTATIONS or key.startswith("x-"):
            continue
        if key in SCHEMA_MAPS and isinstance(value, dict):
            out[key] = {name: strip(sub) for name, sub in value.items()}
        elif key in SCHEMA_ONE:
            out[key] = strip(value)
        elif key in SCHEMA_LISTS and isinstance(value, list):
            out[key] = [strip(sub) for sub in value]
        else:
            out[key] = value
    return out


def refs(node: object):
    """Every component name `node` references."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "$ref" and isinstance(value, str) and value.startswith(REF_PREFIX):
                yield value[len(REF_PREFIX) :]
            else:
                yield from refs(value)
    elif isinstance(node, list):
        for value in node:
            yield from refs(value)


def reachable(schemas: dict, roots: list[str]) -> dict:
    """The roots and every schema reachable from them, by name (sorted)."""
    found: dict = {}
    todo = list(roots)
    while todo:
        name = todo.pop()
        if name in found:
            continue
        if name not in schemas:
            raise SystemExit(f"extract.py: `{name}` is referenced but not in components.schemas")
        found[name] = strip(schemas[name])
        todo.extend(refs(found[name]))
    return dict(sorted(found.items()))


def load(path: Path) -> dict:
    text = path.read_text(encoding="utf-8")
    if path.suffix in (".yaml", ".yml"):
        import yaml  # only needed for the OpenAI spec

        return yaml.safe_load(text)
    return json.loads(text)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("source", choices=sorted(SOURCES))
    ap.add_argument("document", type=Path, help="the provider's OpenAPI document")
    ap.add_argument("--commit", required=True, help="the source repository's commit it was read at")
    ap.add_argument("--note", default="", help="how the document was obtained, if not a checkout")
    args = ap.parse_args()
    source = SOURCES[args.source]
    doc = load(args.document)
    schemas = doc["components"]["schemas"]
    out = {
        "$comment": (
            "Generated by emulator/sdk/schemas/extract.py: the request schemas reachable from "
            f"{', '.join(source['roots'])}, annotations dropped; do not edit by hand, re-run the script."
        ),
        "x-source": {
            "repository": source["repository"],
            "path": source["path"],
            "commit": args.commit,
            "license": source["license"],
            "openapi": doc.get("openapi"),
            "info.version": (doc.get("info") or {}).get("version"),
            "roots": source["roots"],
            **({"note": args.note} if args.note else {}),
        },
        "components": {"schemas": reachable(schemas, source["roots"])},
    }
    json.dump(out, sys.stdout, indent=1, ensure_ascii=False)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
