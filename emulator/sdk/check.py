#!/usr/bin/env python3
"""Drives the providers' official Python SDKs against a running emulator and checks that
every answer parses into the SDK's own types.

    scripts/test -p llm-failover-emulator sdk    # makes target/sdk-venv with requirements.txt
    target/sdk-venv/bin/python emulator/sdk/check.py http://127.0.0.1:PORT [--key KEY] [--providers openai,...]

URL is the emulator's root (what `Emulator::url()` gives, or the printed base URLs without
their `/{prefix}/...`); the providers are served under the prefixes `openai`, `azure`
(through the openai SDK's `AzureOpenAI`), `anthropic`, `gemini`, `vertex` (google-genai in
Vertex AI mode), `bedrock` (through boto3's `bedrock-runtime` client) and `deepgram`, as in
emulator/emulator.toml (which leaves azure, gemini, vertex and bedrock out: pass
`--providers openai,anthropic,deepgram` against it).

Besides chat, streams, transcriptions, embeddings (openai's `embeddings.create` — base64 by
default, floats, lists, token arrays —, google-genai's `embed_content`, boto3's `invoke_model`
for Titan and Cohere) and errors, every chat format is checked with tools
(a call, a round trip with its result, parallel calls, streamed calls), a structured answer
and an image, asserting the SDK's own typed objects hold them
(`message.tool_calls[0].function`, `content[i].type == "tool_use"`,
`response.function_calls`, `message.parsed`, Bedrock's `toolUse` blocks). The key defaults
to the demo key `emulator-key` ($EMULATOR_KEY, or --key; --key-for PREFIX=KEY for one
provider); Bedrock's is its AWS credentials, `--key-for bedrock=ACCESS_KEY_ID:SECRET` or
`ACCESS_KEY_ID:SECRET:SESSION_TOKEN` (what `Emulator::aws_credentials` gives), signed for
--aws-region (us-east-1); Vertex's is the path of its service-account key file (`--key-for
vertex=PATH`, what `Emulator::service_account_key(..).to_json()` holds; without one the
admin endpoint `/_admin/service_account?provider=vertex` serves it), whose `token_uri` is
the emulator's token endpoint: google-auth signs its JWT and fetches the access token there. Bedrock's answers are also checked against botocore's own service
model of `bedrock-runtime`: every member known, every required one present, unions with one
member, enums in their sets.

The SDKs only ever talk to the loopback address: proxies and the SDKs' own environment
variables are cleared before they are imported (boto3's `AWS_*` too, with its config and
credentials files pointed at the null device and the instance metadata service off), and any
connection or name lookup for another host fails the check at once.

Each check prints `ok NAME (MS ms)`; the run ends with `N passed, M failed` and exits
non-zero when a check failed (2 when an SDK is missing).
"""

from __future__ import annotations

import argparse
import functools
import ipaddress
import json
import os
import socket
import struct
import sys
import time
import traceback
import urllib.parse
import urllib.request
from importlib import metadata
from pathlib import Path

HERE = Path(__file__).resolve().parent
PROVIDERS = ("openai", "azure", "anthropic", "gemini", "vertex", "bedrock", "deepgram")
# The distribution behind each provider's check (names as in requirements.txt).
DISTRIBUTIONS = {
    "openai": "openai",
    "azure": "openai",
    "anthropic": "anthropic",
    "gemini": "google-genai",
    "vertex": "google-genai",
    "bedrock": "boto3",
    "deepgram": "deepgram-sdk",
}

# --------------------------------------------------------------------------------------------
# Nothing leaves the machine.

_ENV_PREFIXES = (
    "OPENAI_",
    "ANTHROPIC_",
    "CLAUDE_",
    "GOOGLE_",
    "GEMINI_",
    "VERTEX",
    "DEEPGRAM_",
    "AZURE_OPENAI",
    "AWS_",
    "BOTO_",
)
_PROXY_VARS = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY", "WS_PROXY", "WSS_PROXY")


def scrub_environment() -> None:
    """Drops proxies, the SDKs' keys/base URLs/profiles and telemetry switches from the
    environment, so only the arguments of this script configure a client."""
    for name in list(os.environ):
        upper = name.upper()
        if upper in _PROXY_VARS or upper.startswith(_ENV_PREFIXES) or upper.startswith("OTEL_"):
            del os.environ[name]
    os.environ["NO_PROXY"] = "*"
    os.environ["OTEL_SDK_DISABLED"] = "true"
    # boto3 reads no profile, no credentials file and no instance metadata: the check passes
    # its credentials, region and endpoint explicitly.
    os.environ["AWS_CONFIG_FILE"] = os.devnull
    os.environ["AWS_SHARED_CREDENTIALS_FILE"] = os.devnull
    os.environ["AWS_EC2_METADATA_DISABLED"] = "true"


def _loopback(host: object) -> bool:
    if not isinstance(host, str):
        return False
    if host in ("localhost", "localhost.localdomain"):
        return True
    try:
        return ipaddress.ip_address(host.split("%")[0]).is_loopback
    except ValueError:
        return False


class NetworkRefused(OSError):
    """A connection or lookup for a host that is not the loopback address."""


def guard_network() -> None:
    """Refuses every connection and name lookup that is not for the loopback address."""
    real_connect = socket.socket.connect
    real_connect_ex = socket.socket.connect_ex
    real_getaddrinfo = socket.getaddrinfo

    def check(sock: socket.socket, address: object) -> None:
        if sock.family in (socket.AF_INET, socket.AF_INET6):
            host = address[0] if isinstance(address, tuple) else address
            if not _loopback(host):
                raise NetworkRefused(
                    f"check.py: refused a connection to {address!r} (loopback only)"
                )

    def connect(self: socket.socket, address: object) -> None:
        check(self, address)
        return real_connect(self, address)

    def connect_ex(self: socket.socket, address: object) -> int:
        check(self, address)
        return real_connect_ex(self, address)

    def getaddrinfo(host: object, *args: object, **kwargs: object) -> list:
        if host is not None and not _loopback(
            host if not isinstance(host, bytes) else host.decode()
        ):
            raise NetworkRefused(f"check.py: refused a name lookup for {host!r} (loopback only)")
        return real_getaddrinfo(host, *args, **kwargs)

    socket.socket.connect = connect  # type: ignore[method-assign]
    socket.socket.connect_ex = connect_ex  # type: ignore[method-assign]
    socket.getaddrinfo = getaddrinfo  # type: ignore[assignment]


# --------------------------------------------------------------------------------------------
# Helpers.


def wav(seconds: float) -> bytes:
    """`seconds` of silence as a 16 kHz mono 16-bit WAV file."""
    data = b"\0" * (int(seconds * 16_000) * 2)
    fmt = struct.pack("<IHHIIHH", 16, 1, 1, 16_000, 32_000, 2, 16)
    return (
        b"RIFF"
        + struct.pack("<I", 36 + len(data))
        + b"WAVEfmt "
        + fmt
        + b"data"
        + struct.pack("<I", len(data))
        + data
    )


class Admin:
    """The emulator's admin endpoint: counters and fault scripts."""

    def __init__(self, root: str) -> None:
        self.root = root.rstrip("/")

    def _call(self, method: str, path: str, body: object = None) -> object:
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(
            f"{self.root}/_admin/{path}",
            data=data,
            method=method,
            headers={"content-type": "application/json"},
        )
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        with opener.open(req, timeout=10) as resp:
            return json.loads(resp.read())

    def counters(self) -> dict:
        return self._call("GET", "counters")  # type: ignore[return-value]

    def requests(self, prefix: str) -> int:
        counters = self.counters()
        if prefix not in counters:
            raise AssertionError(
                f"the emulator at {self.root} serves no provider {prefix!r}: {sorted(counters)}"
            )
        return int(counters[prefix]["requests"])

    def script(self, prefix: str, steps: list) -> None:
        self._call("POST", "faults", {"provider": prefix, "script": steps})

    def service_account(self, prefix: str) -> dict:
        """A Vertex provider's service-account key file, its token_uri the emulator's."""
        return self._call("GET", f"service_account?provider={prefix}")  # type: ignore[return-value]

    def log(self) -> list:
        return self._call("GET", "log")  # type: ignore[return-value]


def strict(model_cls: type, obj: object) -> object:
    """Validates `obj` (raw JSON, or an SDK object built without validation) against the
    pydantic model `model_cls`: the Stainless and Fern SDKs build their objects without
    validation, so a wrong type would otherwise pass unnoticed."""
    if hasattr(obj, "model_dump"):
        obj = obj.model_dump(mode="json", by_alias=True, exclude_unset=True, warnings=False)
    return model_cls.model_validate(obj)


def expect(cond: object, what: str) -> None:
    if not cond:
        raise AssertionError(what)


# --------------------------------------------------------------------------------------------
# The checks, one function per SDK; each yields (name, callable).


def openai_checks(root: str, key: str, admin: Admin):
    import openai
    from openai.types.audio import Transcription, TranscriptionVerbose
    from openai.types.chat import ChatCompletion, ChatCompletionChunk

    base = f"{root}/openai/v1"
    client = openai.OpenAI(base_url=base, api_key=key, max_retries=0, timeout=20)
    messages = [{"role": "user", "content": "Say hello to the official SDK"}]

    def chat():
        raw = client.chat.completions.with_raw_response.create(
            model="gpt-4o-mini", messages=messages
        )
        done = raw.parse()
        expect(isinstance(done, ChatCompletion), f"{type(done)}")
        strict(ChatCompletion, raw.http_response.json())
        expect(done.choices[0].message.role == "assistant", done)
        expect(done.choices[0].finish_reason == "stop", done)
        expect(
            done.usage
            and done.usage.total_tokens == done.usage.prompt_tokens + done.usage.completion_tokens,
            done,
        )
        expect(raw.headers.get("x-request-id", "").startswith("req_"), raw.headers)
        return done.choices[0].message.content

    def stream():
        whole = chat()
        chunks = list(
            client.chat.completions.create(
                model="gpt-4o-mini",
                messages=messages,
                stream=True,
                stream_options={"include_usage": True},
            )
        )
        for c in chunks:
            expect(isinstance(c, ChatCompletionChunk), f"{type(c)}")
            strict(ChatCompletionChunk, c)
        text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        expect(text == whole, f"streamed {text!r} != whole {whole!r}")
        expect(chunks[-1].choices == [] and chunks[-1].usage is not None, chunks[-1])
        expect(
            any(c.choices and c.choices[0].finish_reason == "stop" for c in chunks),
            "no finish_reason",
        )

    audio = ("speech.wav", wav(3.0), "audio/wav")

    def transcription_json():
        raw = client.audio.transcriptions.with_raw_response.create(model="whisper-1", file=audio)
        t = raw.parse()
        expect(isinstance(t, Transcription), f"{type(t)}")
        strict(Transcription, raw.http_response.json())
        expect(t.text, t)

    def transcription_words():
        for granularities, words, segments in (
            (["word"], True, False),
            (["word", "segment"], True, True),
            (None, False, True),
        ):
            kwargs = {} if granularities is None else {"timestamp_granularities": granularities}
            raw = client.audio.transcriptions.with_raw_response.create(
                model="whisper-1", file=audio, response_format="verbose_json", **kwargs
            )
            t = raw.parse()
            what = f"{granularities}: {t}"
            expect(isinstance(t, TranscriptionVerbose), f"{type(t)}")
            strict(TranscriptionVerbose, raw.http_response.json())
            expect(t.duration == 3.0 and t.language == "english", what)
            expect((t.words is not None) == words, what)
            expect((t.segments is not None) == segments, what)
            if words:
                expect(len(t.words) == len(t.text.split()), what)
                expect(all(0 <= w.start < w.end <= t.duration for w in t.words), what)
            if segments:
                expect(t.segments and t.segments[0].start == 0.0, what)

    def quota_not_retried():
        retrying = openai.OpenAI(base_url=base, api_key=key, max_retries=2, timeout=20)
        admin.script("openai", [{"kind": "insufficient_quota"}] * 3)
        before = admin.requests("openai")
        try:
            retrying.chat.completions.create(model="gpt-4o-mini", messages=messages)
        except openai.RateLimitError as e:
            err = e
        else:
            raise AssertionError("insufficient_quota did not raise RateLimitError")
        finally:
            admin.script("openai", [])
        sent = admin.requests("openai") - before
        expect(
            sent == 1, f"the SDK sent {sent} requests for an insufficient_quota 429 (max_retries=2)"
        )
        expect(err.status_code == 429 and err.code == "insufficient_quota", err)
        expect(err.response.headers.get("x-should-retry") == "false", dict(err.response.headers))

    def rate_limit_retried():
        retrying = openai.OpenAI(base_url=base, api_key=key, max_retries=1, timeout=20)
        admin.script("openai", [{"kind": "rate_limit", "retry_after": {"seconds": 0}}])
        before = admin.requests("openai")
        try:
            done = retrying.chat.completions.create(model="gpt-4o-mini", messages=messages)
        finally:
            admin.script("openai", [])
        sent = admin.requests("openai") - before
        expect(sent == 2, f"a plain 429 should be retried once; the SDK sent {sent} requests")
        expect(isinstance(done, ChatCompletion), f"{type(done)}")

    def wrong_key():
        bad = openai.OpenAI(
            base_url=base, api_key="sk-wrong-key-0123456789", max_retries=0, timeout=20
        )
        try:
            bad.chat.completions.create(model="gpt-4o-mini", messages=messages)
        except openai.AuthenticationError as e:
            expect(e.code == "invalid_api_key", e)
        else:
            raise AssertionError("a wrong key did not raise AuthenticationError")

    yield "openai chat completion", chat
    yield "openai streaming chat", stream
    yield from openai_embedding_checks(client, "text-embedding-3-small", "openai")
    yield "openai transcription json", transcription_json
    yield "openai transcription verbose_json word timestamps", transcription_words
    yield "openai insufficient_quota is a RateLimitError, not retried", quota_not_retried
    yield "openai plain rate limit is retried", rate_limit_retried
    yield "openai wrong key is an AuthenticationError", wrong_key
    yield from openai_tool_checks(client, "gpt-4o-mini", "openai")


def unit_length(v) -> bool:
    return abs(sum(x * x for x in v) - 1.0) < 1e-3


def openai_embedding_checks(client, model: str, label: str):
    """`embeddings.create` through the openai SDK (`client` an OpenAI or AzureOpenAI client,
    `model` the model or the deployment): base64 by default, floats, a list, token arrays,
    `dimensions`, and the 2048-input limit."""
    import openai
    from openai.types import CreateEmbeddingResponse

    text = "The weather in Paris"

    def default_base64():
        raw = client.embeddings.with_raw_response.create(model=model, input=text)
        sent = json.loads(raw.http_request.content)
        expect(sent.get("encoding_format") == "base64", f"the SDK sent {sent}")
        body = raw.http_response.json()
        expect(isinstance(body["data"][0]["embedding"], str), "a base64 string was answered")
        r = raw.parse()
        expect(isinstance(r, CreateEmbeddingResponse), f"{type(r)}")
        strict(CreateEmbeddingResponse, r)
        v = r.data[0].embedding
        expect(len(v) == 1536 and unit_length(v), f"{len(v)} values")
        expect(r.usage.prompt_tokens == r.usage.total_tokens == 5, r.usage)
        return v

    def floats():
        decoded = default_base64()
        raw = client.embeddings.with_raw_response.create(
            model=model, input=text, encoding_format="float"
        )
        strict(CreateEmbeddingResponse, raw.http_response.json())
        v = raw.parse().data[0].embedding
        expect(len(v) == len(decoded), len(v))
        expect(all(abs(a - b) < 1e-6 for a, b in zip(v, decoded)), "float and base64 differ")

    def many():
        r = client.embeddings.create(
            model=model, input=[text, "How to bake bread"], dimensions=256
        )
        strict(CreateEmbeddingResponse, r)
        expect([d.index for d in r.data] == [0, 1], r.data)
        expect(all(len(d.embedding) == 256 and unit_length(d.embedding) for d in r.data), "")
        tokens = client.embeddings.create(model=model, input=[[1, 2, 3], [4, 5]])
        expect(len(tokens.data) == 2 and tokens.usage.prompt_tokens == 5, tokens.usage)

    def too_many():
        try:
            client.embeddings.create(model=model, input=["a"] * 2049)
        except openai.BadRequestError as e:
            expect(e.code == "array_above_max_length", e)
        else:
            raise AssertionError("2049 inputs were accepted")

    yield f"{label} embeddings (base64, the SDK's default)", default_base64
    yield f"{label} embeddings as floats", floats
    yield f"{label} embeddings of a list, token arrays, dimensions", many
    yield f"{label} embeddings refuse 2049 inputs", too_many


def anthropic_checks(root: str, key: str, admin: Admin):
    import anthropic
    import pydantic
    from anthropic.types import Message, MessageTokensCount, RawMessageStreamEvent

    base = f"{root}/anthropic"
    model = "claude-sonnet-4-5"
    system = "You are terse."
    messages = [{"role": "user", "content": "Hello, Claude"}]

    def client(**kwargs):
        return anthropic.Anthropic(base_url=base, max_retries=0, timeout=20, **kwargs)

    def create(c, name):
        raw = c.messages.with_raw_response.create(
            model=model, max_tokens=256, system=system, messages=messages
        )
        m = raw.parse()
        expect(isinstance(m, Message), f"{name}: {type(m)}")
        strict(Message, raw.http_response.json())
        expect(m.role == "assistant" and m.stop_reason == "end_turn", f"{name}: {m}")
        expect(m.content[0].type == "text" and m.content[0].text, f"{name}: {m}")
        expect(raw.headers.get("request-id", "").startswith("req_"), f"{name}: {raw.headers}")
        return raw.http_request.headers, m

    def with_x_api_key():
        c = client(api_key=key, default_headers={"X-Api-Key": key, "Authorization": anthropic.omit})
        sent, _ = create(c, "x-api-key")
        expect("authorization" not in sent and sent.get("x-api-key") == key, f"sent {dict(sent)}")

    def with_auth_token():
        sent, _ = create(client(auth_token=key), "auth_token")
        expect(
            sent.get("authorization") == f"Bearer {key}" and "x-api-key" not in sent,
            f"sent {dict(sent)}",
        )

    def with_api_key():
        # Whatever header this SDK version puts an api_key in.
        create(client(api_key=key), "api_key")

    def stream():
        c = client(auth_token=key)
        _, whole = create(c, "stream")
        with c.messages.stream(model=model, max_tokens=256, system=system, messages=messages) as s:
            text = "".join(s.text_stream)
            final = s.get_final_message()
        expect(isinstance(final, Message), f"{type(final)}")
        strict(Message, final)
        expect(
            text == whole.content[0].text == final.content[0].text,
            f"{text!r} vs {whole.content[0].text!r}",
        )
        expect(
            final.stop_reason == "end_turn"
            and final.usage.output_tokens == whole.usage.output_tokens,
            final,
        )
        events = list(
            c.messages.create(model=model, max_tokens=256, messages=messages, stream=True)
        )
        kinds = [e.type for e in events]
        expect(kinds[0] == "message_start" and kinds[-1] == "message_stop", kinds)
        union = pydantic.TypeAdapter(RawMessageStreamEvent)
        for e in events:
            union.validate_python(
                e.model_dump(mode="json", by_alias=True, exclude_unset=True, warnings=False)
            )

    def count_tokens():
        c = client(auth_token=key)
        _, m = create(c, "count")
        raw = c.messages.with_raw_response.count_tokens(
            model=model, system=system, messages=messages
        )
        n = raw.parse()
        expect(isinstance(n, MessageTokensCount), f"{type(n)}")
        strict(MessageTokensCount, raw.http_response.json())
        expect(
            n.input_tokens == m.usage.input_tokens,
            f"count {n.input_tokens} != message {m.usage.input_tokens}",
        )

    def wrong_key():
        for kwargs in (
            {"auth_token": "nope"},
            {
                "api_key": "nope",
                "default_headers": {"X-Api-Key": "nope", "Authorization": anthropic.omit},
            },
        ):
            try:
                client(**kwargs).messages.create(model=model, max_tokens=5, messages=messages)
            except anthropic.AuthenticationError as e:
                expect(e.body["error"]["type"] == "authentication_error", e.body)
            else:
                raise AssertionError(
                    f"a wrong key ({sorted(kwargs)}) did not raise AuthenticationError"
                )

    yield "anthropic messages.create with x-api-key", with_x_api_key
    yield "anthropic messages.create with auth_token (Bearer)", with_auth_token
    yield "anthropic messages.create with api_key", with_api_key
    yield "anthropic streaming", stream
    yield "anthropic messages.count_tokens", count_tokens
    yield "anthropic wrong key is an AuthenticationError", wrong_key
    yield from anthropic_tool_checks(client(auth_token=key), model)


def gemini_checks(root: str, key: str, admin: Admin):
    from google import genai
    from google.genai import errors, types

    def client(k=key):
        opts = types.HttpOptions(base_url=f"{root}/gemini", api_version="v1beta", timeout=20_000)
        return genai.Client(api_key=k, http_options=opts)

    model = "gemini-2.0-flash"
    prompt = "Hello, Gemini"

    # A client closes its connections when it is dropped: keep it while its answers are read.
    gemini = client()

    def generate():
        r = gemini.models.generate_content(model=model, contents=prompt)
        expect(isinstance(r, types.GenerateContentResponse), f"{type(r)}")
        expect(r.text and r.candidates[0].finish_reason == types.FinishReason.STOP, r)
        u = r.usage_metadata
        expect(u and u.total_token_count == u.prompt_token_count + u.candidates_token_count, u)
        return r.text

    def stream():
        whole = generate()
        chunks = list(gemini.models.generate_content_stream(model=model, contents=prompt))
        expect(all(isinstance(c, types.GenerateContentResponse) for c in chunks), chunks)
        text = "".join(c.text or "" for c in chunks)
        expect(text == whole, f"streamed {text!r} != whole {whole!r}")
        expect(chunks[-1].candidates[0].finish_reason == types.FinishReason.STOP, chunks[-1])

    def wrong_key():
        bad = client("nope")
        try:
            bad.models.generate_content(model=model, contents=prompt)
        except errors.ClientError as e:
            expect(e.code == 400 and e.status == "INVALID_ARGUMENT", e)
        else:
            raise AssertionError("a wrong key did not raise ClientError")

    yield "gemini generate_content", generate
    yield "gemini generate_content_stream", stream
    yield "gemini wrong key is a ClientError", wrong_key
    yield from gemini_tool_checks(gemini, model, "gemini")
    yield from gemini_embedding_checks(gemini, "gemini")


def vertex_checks(root: str, key: str, admin: Admin):
    """google-genai in Vertex AI mode: `genai.Client(vertexai=True, project, location,
    credentials, http_options.base_url)` with service-account credentials from the
    emulator's key file (`key` is its path; without one, the admin endpoint serves it), whose
    `token_uri` is the emulator's token endpoint: google-auth signs the JWT and fetches the
    access token there. With project and location set, a custom base URL keeps google-genai's
    Vertex paths (`{base_url}/v1beta1/projects/…/locations/…/publishers/google/models/…`)."""
    from google import genai
    from google.auth import _helpers as google_helpers
    from google.auth import exceptions as auth_errors
    from google.auth import jwt as google_jwt
    from google.auth.transport.requests import Request
    from google.genai import errors, types
    from google.oauth2 import _client as oauth_client
    from google.oauth2 import credentials as user_credentials
    from google.oauth2 import service_account

    if key and os.path.isfile(key):
        info = json.loads(Path(key).read_text())
    else:
        info = admin.service_account("vertex")
    project, base = info["project_id"], f"{root}/vertex"
    scopes = ["https://www.googleapis.com/auth/cloud-platform"]
    model = "gemini-2.0-flash"
    prompt = "Hello, Vertex"

    def credentials(info=info, scopes=scopes):
        return service_account.Credentials.from_service_account_info(info, scopes=scopes)

    def client(creds, location="us-central1"):
        opts = types.HttpOptions(base_url=base, timeout=20_000)
        return genai.Client(
            vertexai=True, project=project, location=location, credentials=creds, http_options=opts
        )

    creds = credentials()
    vertex = client(creds)

    def token_fetched():
        expect(creds.token is None, "a token before any request")
        r = vertex.models.generate_content(model=model, contents=prompt)
        expect(r.text, r)
        expect(creds.token and creds.token.startswith("ya29."), creds.token)
        left = (creds.expiry - google_helpers.utcnow()).total_seconds()
        expect(3500 < left <= 3599, f"the token expires in {left} s")
        fetched = [e for e in admin.log() if e["path"] == "/vertex/token"]
        expect(fetched and fetched[-1]["status"] == 200, fetched)

    def generate():
        r = vertex.models.generate_content(model=model, contents=prompt)
        expect(isinstance(r, types.GenerateContentResponse), f"{type(r)}")
        expect(r.text and r.candidates[0].finish_reason == types.FinishReason.STOP, r)
        expect(r.create_time is not None, r)
        u = r.usage_metadata
        expect(u.total_token_count == u.prompt_token_count + u.candidates_token_count, u)
        expect(u.traffic_type == types.TrafficType.ON_DEMAND, u)
        return r.text

    def stream():
        whole = generate()
        chunks = list(vertex.models.generate_content_stream(model=model, contents=prompt))
        expect(all(isinstance(c, types.GenerateContentResponse) for c in chunks), chunks)
        text = "".join(c.text or "" for c in chunks)
        expect(text == whole, f"streamed {text!r} != whole {whole!r}")
        expect(chunks[-1].candidates[0].finish_reason == types.FinishReason.STOP, chunks[-1])

    def global_location():
        # A client closes its connections when it is dropped: keep it while it answers.
        global_client = client(creds, location="global")
        r = global_client.models.generate_content(model=model, contents=prompt)
        expect(r.text, r)
        paths = [e["path"] for e in admin.log() if e["path"].endswith(":generateContent")]
        expect("/locations/global/" in paths[-1], paths[-1])

    def refused(call, what):
        try:
            call()
        except auth_errors.RefreshError as e:
            return str(e)
        raise AssertionError(f"{what} was accepted")

    def invalid_credentials():
        from cryptography.hazmat.primitives import serialization
        from cryptography.hazmat.primitives.asymmetric import rsa

        other = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        pem = other.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        ).decode()
        forged = client(credentials(dict(info, private_key=pem)))
        got = refused(lambda: forged.models.generate_content(model=model, contents=prompt), "another key")
        expect("invalid_grant: Invalid JWT Signature." in got, got)
        unscoped = client(credentials(scopes=None))
        got = refused(lambda: unscoped.models.generate_content(model=model, contents=prompt), "no scope")
        expect("invalid_scope" in got, got)
        # An assertion an hour and a half old, signed by the right key, through google-auth's
        # own token client.
        now = int(time.time())
        late = google_jwt.encode(creds.signer, {
            "iss": info["client_email"], "scope": scopes[0],
            "aud": "https://oauth2.googleapis.com/token", "iat": now - 5400, "exp": now - 1800,
        })
        got = refused(lambda: oauth_client.jwt_grant(Request(), info["token_uri"], late), "an expired JWT")
        expect("Token must be a short-lived token" in got, got)

    def unknown_token():
        stranger = client(user_credentials.Credentials(token="ya29.never-issued"))
        try:
            stranger.models.generate_content(model=model, contents=prompt)
        except errors.ClientError as e:
            expect(e.code == 401 and e.status == "UNAUTHENTICATED", e)
            expect(e.details["error"]["details"][0]["reason"] == "ACCESS_TOKEN_TYPE_UNSUPPORTED", e.details)
        else:
            raise AssertionError("a token the emulator never issued was accepted")

    def throttled():
        admin.script("vertex", [{"kind": "rate_limit"}])
        before = admin.requests("vertex")
        try:
            vertex.models.generate_content(model=model, contents=prompt)
        except errors.ClientError as e:
            expect(e.code == 429 and e.status == "RESOURCE_EXHAUSTED", e)
            expect(e.message.startswith("Resource exhausted. Please try again later."), e.message)
            expect(not any("ratelimit" in h.lower() for h in (e.response.headers if e.response else {})), "")
        else:
            raise AssertionError("a scripted 429 did not raise ClientError")
        finally:
            admin.script("vertex", [])
        sent = admin.requests("vertex") - before
        expect(sent == 1, f"google-genai sent {sent} requests for one 429")

    yield "vertex token fetched from the emulator's token endpoint", token_fetched
    yield "vertex generate_content", generate
    yield "vertex generate_content_stream", stream
    yield "vertex global location", global_location
    yield "vertex a forged, unscoped or expired credential is refused", invalid_credentials
    yield "vertex an unknown access token is a 401 UNAUTHENTICATED", unknown_token
    yield "vertex a 429 is RESOURCE_EXHAUSTED, sent once", throttled
    yield from gemini_tool_checks(vertex, model, "vertex")
    yield from gemini_embedding_checks(vertex, "vertex", vertex=True)


def gemini_embedding_checks(client, label: str, vertex: bool = False):
    """`models.embed_content` through google-genai: one text and a list, shortened, and (on
    the Gemini API) a batch over the 100-request limit; on Vertex AI also a text-embedding
    model, which google-genai sends to `:predict`."""
    from google.genai import errors, types

    def embed(model, contents, **config):
        r = client.models.embed_content(
            model=model, contents=contents, config=types.EmbedContentConfig(**config)
        )
        expect(isinstance(r, types.EmbedContentResponse), f"{type(r)}")
        expect(all(isinstance(e, types.ContentEmbedding) for e in r.embeddings), r)
        return r

    def gemini_embedding():
        one = embed("gemini-embedding-001", "The weather in Paris", task_type="RETRIEVAL_QUERY")
        (e,) = one.embeddings
        expect(len(e.values) == 3072 and unit_length(e.values), len(e.values))
        many = embed(
            "gemini-embedding-001",
            ["The weather in Paris", "How to bake bread"],
            output_dimensionality=768,
            task_type="RETRIEVAL_DOCUMENT",
        )
        expect([len(x.values) for x in many.embeddings] == [768, 768], many)
        expect(many.embeddings[0].values == e.values[:768], "not the first 768 values")
        if vertex:
            stats = e.statistics
            expect(stats is not None and stats.token_count == 5, stats)

    def batch_limit():
        try:
            embed("gemini-embedding-001", ["x"] * 101)
        except errors.ClientError as err:
            expect(err.code == 400 and err.status == "INVALID_ARGUMENT", err)
            expect("at most 100 requests" in err.message, err.message)
        else:
            raise AssertionError("a batch of 101 was accepted")

    def predict():
        r = embed(
            "text-embedding-005",
            ["The weather in Paris", "How to bake bread"],
            output_dimensionality=256,
            task_type="RETRIEVAL_DOCUMENT",
        )
        expect([len(x.values) for x in r.embeddings] == [256, 256], r)
        expect([x.statistics.token_count for x in r.embeddings] == [5, 5], r)
        expect(r.embeddings[0].statistics.truncated is False, r.embeddings[0])
        expect(r.metadata and r.metadata.billable_character_count == 17 + 14, r.metadata)

    yield f"{label} embed_content (gemini-embedding-001)", gemini_embedding
    if vertex:
        yield f"{label} embed_content (text-embedding-005, :predict)", predict
    else:
        yield f"{label} embed_content refuses a batch of 101", batch_limit


def deepgram_checks(root: str, key: str, admin: Admin):
    from deepgram import DeepgramClient
    from deepgram.core.api_error import ApiError
    from deepgram.environment import DeepgramClientEnvironment
    from deepgram.types.listen_v1response import ListenV1Response

    ws = root.replace("http://", "ws://", 1)
    env = DeepgramClientEnvironment(
        base=f"{root}/deepgram",
        production=f"{ws}/deepgram",
        agent=f"{ws}/deepgram",
        agent_rest=f"{root}/deepgram",
    )

    def client(k=key):
        return DeepgramClient(api_key=k, environment=env, max_retries=0, timeout=20)

    def prerecorded():
        raw = client().listen.v1.media.with_raw_response.transcribe_file(
            request=wav(2.0), model="nova-3", smart_format=True
        )
        r = raw.data
        expect(isinstance(r, ListenV1Response), f"{type(r)}")
        strict(ListenV1Response, raw._response.json())  # the body as sent (no public accessor)
        expect(raw.headers.get("dg-request-id") == r.metadata.request_id, raw.headers)
        expect(r.metadata.duration == 2.0 and r.metadata.channels == 1, r.metadata)
        alt = r.results.channels[0].alternatives[0]
        expect(alt.transcript and alt.words, alt)
        expect(len(alt.words) == len(alt.transcript.split()), alt)
        expect(all(w.punctuated_word for w in alt.words), alt.words)

    def wrong_key():
        try:
            client("nope").listen.v1.media.transcribe_file(request=wav(0.5), model="nova-3")
        except ApiError as e:
            expect(e.status_code == 401 and e.body["err_code"] == "INVALID_AUTH", e)
        else:
            raise AssertionError("a wrong key did not raise ApiError")

    yield "deepgram prerecorded transcription", prerecorded
    yield "deepgram wrong key is an ApiError 401", wrong_key


# --------------------------------------------------------------------------------------------
# Tools, structured answers and images: the same conversation in every format.

WEATHER_PROMPT = "What's the weather in Paris?"
BOTH_PROMPT = "What is the weather in Paris and the local time there?"
REPORT_PROMPT = "Describe the weather in Paris as a report."
TOOL_RESULT = "18 C and sunny"
WEATHER_SCHEMA = {
    "type": "object",
    "properties": {
        "city": {"type": "string", "description": "The city"},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
    },
    "required": ["city", "unit"],
    "additionalProperties": False,
}
TIME_SCHEMA = {
    "type": "object",
    "properties": {"timezone": {"type": "string"}},
    "required": ["timezone"],
    "additionalProperties": False,
}
WEATHER_DESCRIPTION = "The current weather in a city."
TIME_DESCRIPTION = "The local time in a timezone."
# A 1×1 PNG.
PNG_BASE64 = (
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
)


def report_model():
    """The structured answer's pydantic model (imported late: pydantic comes with the SDKs)."""
    from typing import Literal

    import pydantic

    class Report(pydantic.BaseModel):
        city: str
        temperature: float
        conditions: Literal["sunny", "cloudy", "rain"]

    return Report


def quoted(text: object) -> bool:
    return isinstance(text, str) and f"The tool get_weather returned: {TOOL_RESULT}" in text


def openai_tool_checks(client, model: str, label: str):
    """Tools, a round trip, streamed calls, a structured answer and an image through the
    openai SDK (`client` an OpenAI or AzureOpenAI client; `label` names the checks)."""
    import openai
    from openai.types.chat import ChatCompletion, ChatCompletionChunk

    tools = [
        {
            "type": "function",
            "function": {
                "name": "get_weather",
                "description": WEATHER_DESCRIPTION,
                "parameters": WEATHER_SCHEMA,
            },
        },
        {
            "type": "function",
            "function": {
                "name": "get_time",
                "description": TIME_DESCRIPTION,
                "parameters": TIME_SCHEMA,
            },
        },
    ]
    asked = [{"role": "user", "content": WEATHER_PROMPT}]

    def create(messages, **kwargs):
        raw = client.chat.completions.with_raw_response.create(
            model=model, messages=messages, tools=tools, **kwargs
        )
        done = raw.parse()
        expect(isinstance(done, ChatCompletion), f"{type(done)}")
        strict(ChatCompletion, raw.http_response.json())
        return done

    def tool_call():
        done = create(asked)
        choice = done.choices[0]
        expect(choice.finish_reason == "tool_calls", choice)
        expect(choice.message.content is None and len(choice.message.tool_calls) == 1, choice)
        call = choice.message.tool_calls[0]
        expect(call.type == "function" and call.function.name == "get_weather", call)
        args = json.loads(call.function.arguments)
        expect(args["city"] == "Paris" and args["unit"] in ("celsius", "fahrenheit"), args)
        again = create(asked).choices[0].message.tool_calls[0]
        expect(again.id == call.id and again.function.arguments == call.function.arguments, again)
        named = create(
            asked, tool_choice={"type": "function", "function": {"name": "get_time"}}
        ).choices[0]
        expect(named.message.tool_calls[0].function.name == "get_time", named)
        none = create(asked, tool_choice="none").choices[0]
        expect(none.finish_reason == "stop" and none.message.content, none)

    def round_trip():
        first = create(asked).choices[0].message
        call = first.tool_calls[0]
        history = asked + [
            first.model_dump(exclude_none=True),
            {"role": "tool", "tool_call_id": call.id, "content": TOOL_RESULT},
        ]
        final = create(history).choices[0]
        expect(final.finish_reason == "stop" and quoted(final.message.content), final)
        try:
            create(asked + [first.model_dump(exclude_none=True)])
        except openai.BadRequestError as e:
            expect("tool_call_id" in str(e), e)
        else:
            raise AssertionError("calls without their results were accepted")

    def parallel():
        calls = create([{"role": "user", "content": BOTH_PROMPT}]).choices[0].message.tool_calls
        expect([c.function.name for c in calls] == ["get_weather", "get_time"], calls)
        expect(calls[0].id != calls[1].id, calls)
        one = create([{"role": "user", "content": BOTH_PROMPT}], parallel_tool_calls=False)
        expect(len(one.choices[0].message.tool_calls) == 1, one)

    def stream():
        whole = create(asked).choices[0].message.tool_calls[0]
        chunks = list(
            client.chat.completions.create(model=model, messages=asked, tools=tools, stream=True)
        )
        pieces = []
        for c in chunks:
            expect(isinstance(c, ChatCompletionChunk), f"{type(c)}")
            if c.object:
                # Azure's first chunk holds only the prompt's filter results, `object: ""`.
                strict(ChatCompletionChunk, c)
            for d in (c.choices[0].delta.tool_calls or []) if c.choices else []:
                expect(d.index == 0, d)
                pieces.append(d)
        expect(pieces[0].id == whole.id and pieces[0].function.name == "get_weather", pieces[0])
        args = [p.function.arguments for p in pieces[1:]]
        expect(len(args) >= 2 and "".join(args) == whole.function.arguments, args)
        expect(any(c.choices and c.choices[0].finish_reason == "tool_calls" for c in chunks), "")
        # The SDK's own accumulation, with a strict tool it parses into its model.
        import pydantic

        class GetWeather(pydantic.BaseModel):
            """The current weather in a city."""

            city: str

        with client.chat.completions.stream(
            model=model, messages=asked, tools=[openai.pydantic_function_tool(GetWeather)]
        ) as s:
            final = s.get_final_completion()
        call = final.choices[0].message.tool_calls[0]
        expect(isinstance(call.function.parsed_arguments, GetWeather), call)
        expect(call.function.parsed_arguments.city == "Paris", call)

    def structured():
        Report = report_model()
        done = client.chat.completions.parse(
            model=model,
            messages=[{"role": "user", "content": REPORT_PROMPT}],
            response_format=Report,
        )
        parsed = done.choices[0].message.parsed
        expect(isinstance(parsed, Report) and parsed.city == "Paris", done)
        expect(done.choices[0].finish_reason == "stop", done)

    def image():
        content = [
            {"type": "text", "text": "What is in this picture?"},
            {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG_BASE64}"}},
        ]
        done = create([{"role": "user", "content": content}], tool_choice="none")
        expect(PNG_BASE64 not in (done.choices[0].message.content or ""), done)
        text_only = create([{"role": "user", "content": content[:1]}], tool_choice="none")
        extra = done.usage.prompt_tokens - text_only.usage.prompt_tokens
        expect(extra == 765, f"an image at auto detail cost {extra} prompt tokens")

    yield f"{label} tool call", tool_call
    yield f"{label} tool round trip", round_trip
    yield f"{label} parallel tool calls", parallel
    yield f"{label} streaming tool calls", stream
    yield f"{label} structured answer (parse)", structured
    yield f"{label} image", image


def anthropic_tool_checks(c, model: str):
    """Tools, a round trip, streamed tool use, structured answers (a forced tool, and
    `output_config`) and an image through the anthropic SDK."""
    import anthropic
    import pydantic
    from anthropic.types import Message, RawMessageStreamEvent

    tools = [
        {"name": "get_weather", "description": WEATHER_DESCRIPTION, "input_schema": WEATHER_SCHEMA},
        {"name": "get_time", "description": TIME_DESCRIPTION, "input_schema": TIME_SCHEMA},
    ]
    asked = [{"role": "user", "content": WEATHER_PROMPT}]

    def create(messages, **kwargs):
        kwargs.setdefault("tools", tools)
        raw = c.messages.with_raw_response.create(
            model=model, max_tokens=256, messages=messages, **kwargs
        )
        m = raw.parse()
        expect(isinstance(m, Message), f"{type(m)}")
        strict(Message, raw.http_response.json())
        return m

    def uses(m):
        return [b for b in m.content if b.type == "tool_use"]

    def tool_use():
        m = create(asked)
        expect(m.stop_reason == "tool_use", m)
        # `auto`: Claude may say something first; the call follows.
        expect(m.content[0].type == "text" and m.content[-1].type == "tool_use", m.content)
        (use,) = uses(m)
        expect(use.name == "get_weather" and use.input["city"] == "Paris", use)
        expect(use.id.startswith("toolu_") and use.id == uses(create(asked))[0].id, use)
        forced = create(asked, tool_choice={"type": "any"})
        expect([b.type for b in forced.content] == ["tool_use"], forced.content)
        both = create([{"role": "user", "content": BOTH_PROMPT}])
        expect([u.name for u in uses(both)] == ["get_weather", "get_time"], both.content)
        one = create(
            [{"role": "user", "content": BOTH_PROMPT}],
            tool_choice={"type": "auto", "disable_parallel_tool_use": True},
        )
        expect(len(uses(one)) == 1, one.content)

    def round_trip():
        m = create(asked)
        (use,) = uses(m)
        history = asked + [
            {"role": "assistant", "content": m.content},
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": use.id, "content": TOOL_RESULT}],
            },
        ]
        final = create(history)
        expect(final.stop_reason == "end_turn" and quoted(final.content[0].text), final)
        try:
            create(asked + [{"role": "assistant", "content": m.content}, {"role": "user", "content": "and?"}])
        except anthropic.BadRequestError as e:
            expect("tool_result" in str(e), e)
        else:
            raise AssertionError("tool_use without its tool_result was accepted")

    def stream():
        whole = uses(create(asked))[0]
        with c.messages.stream(model=model, max_tokens=256, messages=asked, tools=tools) as s:
            events = list(s)
            final = s.get_final_message()
        strict(Message, final)
        expect(final.stop_reason == "tool_use", final)
        (use,) = uses(final)
        expect(use.id == whole.id and use.input == whole.input, (use, whole))
        kinds = [e.type for e in events]
        expect("input_json" in kinds, kinds)
        raw = list(c.messages.create(model=model, max_tokens=256, messages=asked, tools=tools, stream=True))
        union = pydantic.TypeAdapter(RawMessageStreamEvent)
        for e in raw:
            union.validate_python(e.model_dump(mode="json", by_alias=True, exclude_unset=True, warnings=False))
        starts = [e.content_block for e in raw if e.type == "content_block_start"]
        expect(starts[-1].type == "tool_use" and starts[-1].name == "get_weather", starts)
        partial = [e.delta.partial_json for e in raw if e.type == "content_block_delta" and e.delta.type == "input_json_delta"]
        expect(len(partial) >= 2 and json.loads("".join(partial)) == whole.input, partial)

    def forced_tool():
        Report = report_model()
        schema = Report.model_json_schema()
        m = create(
            [{"role": "user", "content": REPORT_PROMPT}],
            tools=[{"name": "report", "description": "Record a weather report.", "input_schema": schema}],
            tool_choice={"type": "tool", "name": "report"},
        )
        expect([b.type for b in m.content] == ["tool_use"] and m.stop_reason == "tool_use", m)
        report = Report.model_validate(m.content[0].input)
        expect(report.city == "Paris", report)

    def output_config():
        Report = report_model()
        m = c.messages.parse(
            model=model,
            max_tokens=256,
            messages=[{"role": "user", "content": REPORT_PROMPT}],
            output_format=Report,
        )
        expect(isinstance(m.parsed_output, Report) and m.parsed_output.city == "Paris", m)

    def image():
        content = [
            {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG_BASE64}},
            {"type": "text", "text": "What is in this picture?"},
        ]
        m = create([{"role": "user", "content": content}], tools=[])
        text_only = create([{"role": "user", "content": content[1:]}], tools=[])
        expect(PNG_BASE64 not in m.content[0].text, m)
        extra = m.usage.input_tokens - text_only.usage.input_tokens
        expect(extra == 1600, f"an image cost {extra} input tokens")
        n = c.messages.count_tokens(model=model, messages=[{"role": "user", "content": content}])
        expect(n.input_tokens == m.usage.input_tokens, (n, m.usage))

    def thinking():
        # docs.claude.com/en/docs/build-with-claude/extended-thinking: a thinking block (text
        # and signature) first; a tool-use turn goes back with it, unchanged, or is refused.
        on = {"type": "enabled", "budget_tokens": 1024}
        raw = c.messages.with_raw_response.create(
            model=model, max_tokens=2048, messages=asked, tools=tools, thinking=on
        )
        m = raw.parse()
        strict(Message, raw.http_response.json())
        expect(m.content[0].type == "thinking" and m.content[0].signature, m.content)
        (use,) = uses(m)
        result = {"role": "user", "content": [{"type": "tool_result", "tool_use_id": use.id, "content": TOOL_RESULT}]}
        final = c.messages.create(
            model=model, max_tokens=2048, tools=tools, thinking=on,
            messages=asked + [{"role": "assistant", "content": m.content}, result],
        )
        expect(final.stop_reason == "end_turn", final)
        bare = [b for b in m.content if b.type != "thinking"]
        try:
            c.messages.create(
                model=model, max_tokens=2048, tools=tools, thinking=on,
                messages=asked + [{"role": "assistant", "content": bare}, result],
            )
        except anthropic.BadRequestError as e:
            expect("must start with a thinking block" in str(e), e)
        else:
            raise AssertionError("a tool-use turn without its thinking block was accepted")
        with c.messages.stream(model=model, max_tokens=2048, messages=asked, tools=tools, thinking=on) as s:
            kinds = [e.type for e in s]
            streamed = s.get_final_message()
        strict(Message, streamed)
        expect(streamed.content[0].type == "thinking" and streamed.content[0].signature == m.content[0].signature, streamed.content)
        expect("thinking" in kinds and "signature" in kinds, kinds)

    yield "anthropic tool use", tool_use
    yield "anthropic extended thinking round trip", thinking
    yield "anthropic tool round trip", round_trip
    yield "anthropic streaming tool use", stream
    yield "anthropic structured answer (forced tool)", forced_tool
    yield "anthropic structured answer (output_config)", output_config
    yield "anthropic image", image


def gemini_tool_checks(gemini, model: str, label: str):
    """Function calls, a round trip, streamed calls, structured answers (JSON Schema and the
    OpenAPI subset) and an image through the google-genai SDK."""
    from google.genai import errors, types

    weather = types.FunctionDeclaration(
        name="get_weather", description=WEATHER_DESCRIPTION, parameters_json_schema=WEATHER_SCHEMA
    )
    clock = types.FunctionDeclaration(
        name="get_time",
        description=TIME_DESCRIPTION,
        parameters=types.Schema(
            type=types.Type.OBJECT,
            properties={"timezone": types.Schema(type=types.Type.STRING)},
            required=["timezone"],
        ),
    )
    config = types.GenerateContentConfig(
        tools=[types.Tool(function_declarations=[weather, clock])],
        automatic_function_calling=types.AutomaticFunctionCallingConfig(disable=True),
    )

    def generate(contents, cfg=config):
        r = gemini.models.generate_content(model=model, contents=contents, config=cfg)
        expect(isinstance(r, types.GenerateContentResponse), f"{type(r)}")
        return r

    def function_call():
        r = generate(WEATHER_PROMPT)
        (call,) = r.function_calls
        expect(call.name == "get_weather" and call.args["city"] == "Paris", call)
        expect(r.candidates[0].finish_reason == types.FinishReason.STOP, r)
        both = generate(BOTH_PROMPT).function_calls
        expect([c.name for c in both] == ["get_weather", "get_time"], both)
        named = config.model_copy(
            update={
                "tool_config": types.ToolConfig(
                    function_calling_config=types.FunctionCallingConfig(
                        mode=types.FunctionCallingConfigMode.ANY, allowed_function_names=["get_time"]
                    )
                )
            }
        )
        expect([c.name for c in generate(WEATHER_PROMPT, named).function_calls] == ["get_time"], "")

    def round_trip():
        r = generate(WEATHER_PROMPT)
        history = [
            types.Content(role="user", parts=[types.Part.from_text(text=WEATHER_PROMPT)]),
            r.candidates[0].content,
            types.Content(
                role="user",
                parts=[types.Part.from_function_response(name="get_weather", response={"result": TOOL_RESULT})],
            ),
        ]
        final = generate(history)
        expect(not final.function_calls and quoted(final.text), final)

    def stream():
        whole = generate(WEATHER_PROMPT).function_calls[0]
        chunks = list(gemini.models.generate_content_stream(model=model, contents=WEATHER_PROMPT, config=config))
        calls = [fc for ch in chunks for fc in (ch.function_calls or [])]
        expect(len(calls) == 1 and calls[0].name == whole.name and calls[0].args == whole.args, calls)
        expect(chunks[-1].candidates[0].finish_reason == types.FinishReason.STOP, chunks[-1])

    def structured():
        Report = report_model()
        for field in ("response_schema", "response_json_schema"):
            schema = Report if field == "response_schema" else Report.model_json_schema()
            cfg = types.GenerateContentConfig(response_mime_type="application/json", **{field: schema})
            r = generate(REPORT_PROMPT, cfg)
            report = r.parsed if field == "response_schema" else Report.model_validate_json(r.text)
            expect(isinstance(report, Report) and report.city == "Paris", (field, r))

    def image():
        png = __import__("base64").b64decode(PNG_BASE64)
        plain = types.GenerateContentConfig()
        r = generate([types.Part.from_bytes(data=png, mime_type="image/png"), "What is in this picture?"], plain)
        text_only = generate(["What is in this picture?"], plain)
        expect(r.text and PNG_BASE64 not in r.text, r)
        extra = r.usage_metadata.prompt_token_count - text_only.usage_metadata.prompt_token_count
        expect(extra == 258, f"an image cost {extra} prompt tokens")

    def thought_signatures():
        # ai.google.dev/gemini-api/docs/thought-signatures: Gemini 3 signs the first call;
        # the SDK keeps the signature on the part and sends it back; a call without one is
        # refused.
        three = "gemini-3-flash-preview"
        r = gemini.models.generate_content(model=three, contents=WEATHER_PROMPT, config=config)
        part = r.candidates[0].content.parts[0]
        expect(part.function_call and part.thought_signature, part)
        result = types.Content(
            role="user",
            parts=[types.Part.from_function_response(name="get_weather", response={"result": TOOL_RESULT})],
        )
        asked = types.Content(role="user", parts=[types.Part.from_text(text=WEATHER_PROMPT)])
        final = gemini.models.generate_content(
            model=three, contents=[asked, r.candidates[0].content, result], config=config
        )
        expect(not final.function_calls and final.candidates[0].content.parts[-1].thought_signature, final)
        bare = types.Content(role="model", parts=[types.Part(function_call=part.function_call)])
        try:
            gemini.models.generate_content(model=three, contents=[asked, bare, result], config=config)
        except errors.ClientError as e:
            expect(e.code == 400 and "thought_signature" in str(e), e)
        else:
            raise AssertionError("a call without its thought signature was accepted")

    yield f"{label} function call", function_call
    yield f"{label} thought signatures round trip", thought_signatures
    yield f"{label} function round trip", round_trip
    yield f"{label} streaming function call", stream
    yield f"{label} structured answer", structured
    yield f"{label} image", image


def azure_checks(root: str, key: str, admin: Admin):
    import openai
    from openai.types.chat import ChatCompletion

    deployment = "gpt-4o-mini"
    client = openai.AzureOpenAI(
        azure_endpoint=f"{root}/azure",
        api_key=key,
        api_version="2024-10-21",
        max_retries=0,
        timeout=20,
    )

    def chat():
        raw = client.chat.completions.with_raw_response.create(
            model=deployment, messages=[{"role": "user", "content": "Hello, Azure"}]
        )
        done = raw.parse()
        expect(isinstance(done, ChatCompletion), f"{type(done)}")
        strict(ChatCompletion, raw.http_response.json())
        expect(done.choices[0].finish_reason == "stop" and done.choices[0].message.content, done)

    yield "azure chat completion", chat
    yield from openai_tool_checks(client, deployment, "azure")
    yield from openai_embedding_checks(client, "text-embedding-3-small", "azure")


def conform(shape, value: object, at: str, raw: bool) -> None:
    """Checks `value` against a botocore shape of the service model: a structure's required
    members present (a union's: exactly one), enums in their sets, scalars of their types;
    on the raw JSON (`raw`) also no member the model does not know (botocore's parser drops
    them, so a parsed answer cannot show one)."""
    t = shape.type_name
    if t == "structure" and shape.is_document_type:
        return
    if t == "structure":
        expect(isinstance(value, dict), f"{at}: {value!r} is not an object")
        members = shape.members
        if raw:
            unknown = sorted(set(value) - set(members))
            expect(not unknown, f"{at}: members {unknown} are not in the service model")
        missing = [m for m in shape.required_members if m not in value]
        expect(not missing, f"{at}: required {missing} missing")
        if shape.is_tagged_union:
            expect(len(value) == 1, f"{at}: a union with {sorted(value)}")
        for name, v in value.items():
            if name in members:
                conform(members[name], v, f"{at}.{name}", raw)
    elif t == "list":
        expect(isinstance(value, list), f"{at}: {value!r} is not a list")
        for i, v in enumerate(value):
            conform(shape.member, v, f"{at}[{i}]", raw)
    elif t == "map":
        expect(isinstance(value, dict), f"{at}: {value!r} is not a map")
    elif t == "string":
        expect(isinstance(value, str), f"{at}: {value!r} is not a string")
        if shape.enum:
            expect(value in shape.enum, f"{at}: {value!r} is not one of {shape.enum}")
    elif t in ("integer", "long"):
        expect(isinstance(value, int) and not isinstance(value, bool), f"{at}: {value!r}")
    elif t in ("float", "double"):
        expect(isinstance(value, (int, float)) and not isinstance(value, bool), f"{at}: {value!r}")
    elif t == "boolean":
        expect(isinstance(value, bool), f"{at}: {value!r}")


def bedrock_checks(root: str, key: str, admin: Admin, region: str = "us-east-1"):
    import boto3
    from botocore.config import Config
    from botocore.exceptions import ClientError, EventStreamError

    access_key_id, _, rest = key.partition(":")
    secret, _, token = rest.partition(":")
    model = "anthropic.claude-3-haiku-20240307-v1:0"
    endpoint = f"{root}/bedrock"

    def client(secret_access_key: str = secret, attempts: int = 1):
        # total_max_attempts 1: botocore retries nothing unless a check asks it to. (Its
        # `max_attempts` counts retries, not attempts: `{"max_attempts": 1}` sends twice.)
        return boto3.client(
            "bedrock-runtime",
            endpoint_url=endpoint,
            region_name=region,
            aws_access_key_id=access_key_id,
            aws_secret_access_key=secret_access_key,
            aws_session_token=token or None,
            config=Config(
                retries={"total_max_attempts": attempts, "mode": "standard"},
                connect_timeout=10,
                read_timeout=20,
            ),
        )

    c = client()
    service = c.meta.service_model
    raw_bodies: list[bytes] = []

    def keep_raw(response_dict, **_):
        raw_bodies.append(response_dict["body"])

    c.meta.events.register("before-parse.bedrock-runtime.Converse", keep_raw)
    converse_shape = service.operation_model("Converse").output_shape
    stream_shape = service.operation_model("ConverseStream").output_shape.members["stream"]
    weather = {"toolSpec": {"name": "get_weather", "description": WEATHER_DESCRIPTION,
                            "inputSchema": {"json": WEATHER_SCHEMA}}}
    clock = {"toolSpec": {"name": "get_time", "description": TIME_DESCRIPTION,
                          "inputSchema": {"json": TIME_SCHEMA}}}

    def user(*blocks) -> dict:
        return {"role": "user", "content": [b if isinstance(b, dict) else {"text": b} for b in blocks]}

    def converse(messages, **kwargs) -> dict:
        r = c.converse(modelId=model, messages=messages, **kwargs)
        body = json.loads(raw_bodies[-1])
        conform(converse_shape, body, "Converse", raw=True)
        conform(converse_shape, {k: v for k, v in r.items() if k != "ResponseMetadata"}, "parsed", raw=False)
        meta = r["ResponseMetadata"]
        expect(meta["HTTPStatusCode"] == 200 and len(meta["RequestId"]) == 36, meta)
        u = r["usage"]
        expect(u["totalTokens"] == u["inputTokens"] + u["outputTokens"], u)
        expect(isinstance(r["metrics"]["latencyMs"], int), r["metrics"])
        expect(r["output"]["message"]["role"] == "assistant", r)
        return r

    def stream(messages, **kwargs) -> list[dict]:
        r = c.converse_stream(modelId=model, messages=messages, **kwargs)
        expect(r["ResponseMetadata"]["HTTPHeaders"]["content-type"] == "application/vnd.amazon.eventstream", r)
        events = list(r["stream"])
        for i, e in enumerate(events):
            expect(len(e) == 1, f"event {i}: {e}")
            name = next(iter(e))
            expect(name in stream_shape.members, f"event {i}: {name} is no ConverseStreamOutput member")
            conform(stream_shape.members[name], e[name], f"stream[{i}].{name}", raw=False)
        names = [next(iter(e)) for e in events]
        expect(names[0] == "messageStart" and names[-2:] == ["messageStop", "metadata"], names)
        return events

    def tool_uses(r) -> list[dict]:
        return [b["toolUse"] for b in r["output"]["message"]["content"] if "toolUse" in b]

    def text_of(r) -> str:
        return "".join(b.get("text", "") for b in r["output"]["message"]["content"])

    def chat():
        r = converse([user("Say hello to boto3")], system=[{"text": "Be brief."}],
                     inferenceConfig={"maxTokens": 200, "temperature": 0.5})
        expect(r["stopReason"] == "end_turn" and text_of(r), r)

    def max_tokens():
        r = converse([user("Tell me everything about the sea")], inferenceConfig={"maxTokens": 3})
        expect(r["stopReason"] == "max_tokens" and r["usage"]["outputTokens"] == 3, r)

    def streamed():
        prompt = [user("Say hello to the boto3 stream")]
        whole = text_of(converse(prompt))
        events = stream(prompt)
        text = "".join(e["contentBlockDelta"]["delta"].get("text", "") for e in events if "contentBlockDelta" in e)
        expect(text == whole, f"streamed {text!r} != whole {whole!r}")
        expect(events[-2]["messageStop"]["stopReason"] == "end_turn", events[-2])
        usage = events[-1]["metadata"]["usage"]
        expect(usage["totalTokens"] == usage["inputTokens"] + usage["outputTokens"], usage)

    def tool_round_trip():
        cfg = {"tools": [weather, clock], "toolChoice": {"any": {}}}
        first = [user(WEATHER_PROMPT)]
        r = converse(first, toolConfig=cfg)
        calls = tool_uses(r)
        expect(r["stopReason"] == "tool_use" and len(calls) == 1, r)
        call = calls[0]
        expect(call["name"] == "get_weather" and call["input"]["city"] == "Paris", call)
        expect(call["toolUseId"].startswith("tooluse_"), call)
        history = first + [r["output"]["message"], user({"toolResult": {
            "toolUseId": call["toolUseId"], "content": [{"text": TOOL_RESULT}], "status": "success",
        }})]
        final = converse(history, toolConfig=cfg)
        expect(final["stopReason"] == "end_turn" and not tool_uses(final), final)
        expect(quoted(text_of(final)), final)
        # A result for no call is refused as Bedrock refuses it.
        try:
            c.converse(modelId=model, messages=[user({"toolResult": {
                "toolUseId": "tooluse_nope", "content": [{"json": {"t": 1}}]}})], toolConfig=cfg)
        except ClientError as e:
            expect(e.response["Error"]["Code"] == "ValidationException", e.response)
        else:
            raise AssertionError("a toolResult of no call was accepted")

    def parallel_and_named():
        cfg = {"tools": [weather, clock]}
        names = [t["name"] for t in tool_uses(converse([user(BOTH_PROMPT)], toolConfig=cfg))]
        expect(names == ["get_weather", "get_time"], names)
        named = dict(cfg, toolChoice={"tool": {"name": "get_time"}})
        names = [t["name"] for t in tool_uses(converse([user(WEATHER_PROMPT)], toolConfig=named))]
        expect(names == ["get_time"], names)

    def streamed_tool_use():
        cfg = {"tools": [weather]}
        whole = tool_uses(converse([user(WEATHER_PROMPT)], toolConfig=cfg))[0]
        events = stream([user(WEATHER_PROMPT)], toolConfig=cfg)
        starts = [e["contentBlockStart"] for e in events if "contentBlockStart" in e]
        expect(len(starts) == 1, starts)
        started = starts[0]["start"]["toolUse"]
        expect(started["toolUseId"] == whole["toolUseId"] and started["name"] == "get_weather", started)
        index = starts[0]["contentBlockIndex"]
        pieces = [e["contentBlockDelta"]["delta"]["toolUse"]["input"] for e in events
                  if "contentBlockDelta" in e and e["contentBlockDelta"]["contentBlockIndex"] == index]
        expect(json.loads("".join(pieces)) == whole["input"], pieces)
        expect(events[-2]["messageStop"]["stopReason"] == "tool_use", events[-2])

    def structured():
        Report = report_model()
        fmt = {"textFormat": {"type": "json_schema", "structure": {"jsonSchema": {
            "name": "report", "schema": json.dumps(Report.model_json_schema())}}}}
        r = converse([user(REPORT_PROMPT)], outputConfig=fmt)
        report = Report.model_validate_json(text_of(r))
        expect(report.city == "Paris", report)

    def image():
        png = __import__("base64").b64decode(PNG_BASE64)
        picture = {"image": {"format": "png", "source": {"bytes": png}}}
        r = converse([user(picture, "What is in this picture?")])
        text_only = converse([user("What is in this picture?")])
        expect(PNG_BASE64 not in text_of(r), r)
        extra = r["usage"]["inputTokens"] - text_only["usage"]["inputTokens"]
        expect(extra == 1600, f"an image cost {extra} input tokens")

    def wrong_secret():
        try:
            client(secret + "x").converse(modelId=model, messages=[user("hi")])
        except ClientError as e:
            err = e.response["Error"]
            expect(err["Code"] == "InvalidSignatureException", e.response)
            expect(err["Message"].startswith("The request signature we calculated does not match"), err)
            expect(e.response["ResponseMetadata"]["HTTPStatusCode"] == 403, e.response)
        else:
            raise AssertionError("a wrong secret was accepted")

    def throttled():
        admin.script("bedrock", [{"kind": "rate_limit"}])
        before = admin.requests("bedrock")
        try:
            c.converse(modelId=model, messages=[user("hi")])
        except c.exceptions.ThrottlingException as e:
            err = e
        else:
            raise AssertionError("a scripted 429 did not raise ThrottlingException")
        finally:
            admin.script("bedrock", [])
        sent = admin.requests("bedrock") - before
        expect(sent == 1, f"total_max_attempts 1 sent {sent} requests")
        expect(err.response["Error"]["Code"] == "ThrottlingException", err.response)
        expect(err.response["Error"]["Message"] == "Too many requests, please wait before trying again.", err.response)
        headers = err.response["ResponseMetadata"]["HTTPHeaders"]
        expect(err.response["ResponseMetadata"]["HTTPStatusCode"] == 429, err.response)
        expect(not any("ratelimit" in h or h == "retry-after" for h in headers), headers)

    def throttling_retried():
        retrying = client(attempts=2)
        admin.script("bedrock", [{"kind": "rate_limit"}])
        before = admin.requests("bedrock")
        try:
            r = retrying.converse(modelId=model, messages=[user("hi")])
        finally:
            admin.script("bedrock", [])
        sent = admin.requests("bedrock") - before
        expect(sent == 2, f"botocore's standard mode should retry a ThrottlingException once; it sent {sent}")
        expect(r["ResponseMetadata"]["RetryAttempts"] == 1, r["ResponseMetadata"])

    def stream_throttled():
        admin.script("bedrock", [{"kind": "stream_error"}])
        try:
            r = c.converse_stream(modelId=model, messages=[user("Tell me a long story about the sea")])
            for _ in r["stream"]:
                pass
        except EventStreamError as e:
            expect(e.response["Error"]["Code"] == "throttlingException", e.response)
            expect(e.response["Error"]["Message"].startswith("Too many requests"), e.response)
        else:
            raise AssertionError("a stream_error fault raised nothing")
        finally:
            admin.script("bedrock", [])

    def invoke(model_id, body) -> dict:
        r = c.invoke_model(
            modelId=model_id, body=json.dumps(body), contentType="application/json",
            accept="application/json",
        )
        expect(r["contentType"] == "application/json", r)
        headers = r["ResponseMetadata"]["HTTPHeaders"]
        answer = json.loads(r["body"].read())
        return answer, headers

    def titan():
        answer, headers = invoke("amazon.titan-embed-text-v2:0", {
            "inputText": "The weather in Paris", "dimensions": 512, "normalize": True,
            "embeddingTypes": ["float", "binary"],
        })
        v = answer["embedding"]
        expect(len(v) == 512 and unit_length(v), len(v))
        expect(answer["inputTextTokenCount"] == 5, answer["inputTextTokenCount"])
        expect(answer["embeddingsByType"]["float"] == v, "embeddingsByType.float")
        expect(set(answer["embeddingsByType"]["binary"]) <= {0, 1}, "binary")
        expect(headers["x-amzn-bedrock-input-token-count"] == "5", headers)

    def cohere():
        texts = ["The weather in Paris", "How to bake bread"]
        answer, _ = invoke("cohere.embed-english-v3", {"texts": texts, "input_type": "search_document"})
        expect(answer["response_type"] == "embeddings_floats" and answer["texts"] == texts, answer.keys())
        expect([len(e) for e in answer["embeddings"]] == [1024, 1024], "1024 values each")
        typed, _ = invoke("cohere.embed-multilingual-v3", {
            "texts": texts, "input_type": "search_query", "embedding_types": ["float", "int8"]})
        expect(typed["response_type"] == "embeddings_by_type", typed.keys())
        expect(sorted(typed["embeddings"]) == ["float", "int8"], typed["embeddings"].keys())
        expect(all(-128 <= x <= 127 for x in typed["embeddings"]["int8"][0]), "int8 range")
        try:
            invoke("cohere.embed-english-v3", {"texts": ["a"] * 97, "input_type": "clustering"})
        except ClientError as e:
            expect(e.response["Error"]["Code"] == "ValidationException", e.response)
            expect("expected maximum item count: 96" in e.response["Error"]["Message"], e.response)
        else:
            raise AssertionError("97 texts were accepted")

    yield "bedrock converse", chat
    yield "bedrock converse stops at maxTokens", max_tokens
    yield "bedrock converse_stream", streamed
    yield "bedrock tool use round trip", tool_round_trip
    yield "bedrock parallel and named tool use", parallel_and_named
    yield "bedrock streamed tool use", streamed_tool_use
    yield "bedrock structured answer (outputConfig)", structured
    yield "bedrock image", image
    yield "bedrock wrong secret is InvalidSignatureException", wrong_secret
    yield "bedrock throttled call is a ThrottlingException, not retried", throttled
    yield "bedrock ThrottlingException retried by botocore's standard mode", throttling_retried
    yield "bedrock mid-stream throttlingException is an EventStreamError", stream_throttled
    yield "bedrock invoke_model Titan Text Embeddings V2", titan
    yield "bedrock invoke_model Cohere Embed", cohere


CHECKS = {
    "openai": openai_checks,
    "azure": azure_checks,
    "anthropic": anthropic_checks,
    "gemini": gemini_checks,
    "vertex": vertex_checks,
    "bedrock": bedrock_checks,
    "deepgram": deepgram_checks,
}

# --------------------------------------------------------------------------------------------


def pinned() -> dict[str, str]:
    pins = {}
    for line in (HERE / "requirements.txt").read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if "==" in line:
            name, version = line.split("==", 1)
            pins[name.strip().lower()] = version.strip()
    return pins


def installed(providers: list[str]) -> dict[str, str]:
    """The installed version of each provider's SDK; exits 2 naming what is missing."""
    versions, missing = {}, []
    for p in providers:
        dist = DISTRIBUTIONS[p]
        try:
            versions[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            if dist not in missing:  # openai serves two providers
                missing.append(dist)
    if missing:
        print(
            f"check.py: missing SDK(s): {', '.join(missing)} (python {sys.executable});"
            " scripts/test installs them into a venv, target/sdk-venv, and runs the tests with it;"
            f" or, in a venv of your own: python -m pip install -r {HERE / 'requirements.txt'}",
            file=sys.stderr,
        )
        sys.exit(2)
    return versions


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("url", help="the emulator's root URL, e.g. http://127.0.0.1:4010")
    parser.add_argument(
        "--key", default=os.environ.get("EMULATOR_KEY", "emulator-key"), help="every provider's key"
    )
    parser.add_argument(
        "--key-for", action="append", default=[], metavar="PREFIX=KEY", help="one provider's key"
    )
    parser.add_argument(
        "--aws-region", default="us-east-1", help="the region Bedrock requests are signed for"
    )
    parser.add_argument(
        "--providers",
        default=",".join(PROVIDERS),
        help="comma-separated, of " + ", ".join(PROVIDERS),
    )
    args = parser.parse_args()

    root = args.url.rstrip("/")
    host = urllib.parse.urlsplit(root).hostname
    if not _loopback(host):
        parser.error(f"{root} is not a loopback URL: the check only talks to 127.0.0.1")
    providers = [p.strip() for p in args.providers.split(",") if p.strip()]
    unknown = sorted(set(providers) - set(PROVIDERS))
    if unknown:
        parser.error(f"unknown providers {unknown}; choose from {list(PROVIDERS)}")
    keys = {p: args.key for p in providers}
    for kv in args.key_for:
        prefix, _, key = kv.partition("=")
        keys[prefix] = key

    scrub_environment()
    guard_network()
    versions = installed(providers)
    pins = pinned()
    print("sdk " + " ".join(f"{d}=={v}" for d, v in versions.items()))
    for dist, version in versions.items():
        if pins.get(dist) not in (None, version):
            print(
                f"check.py: warning: {dist} {version} installed,"
                f" {pins[dist]} pinned in requirements.txt",
                file=sys.stderr,
            )

    admin = Admin(root)
    served = admin.counters()
    absent = [p for p in providers if p not in served]
    if absent:
        print(
            f"check.py: the emulator at {root} serves no {absent} (it serves {sorted(served)})",
            file=sys.stderr,
        )
        return 1

    checks_of = dict(CHECKS, bedrock=functools.partial(bedrock_checks, region=args.aws_region))
    passed, failed = 0, []
    started = time.perf_counter()
    for p in providers:
        try:
            checks = list(checks_of[p](root, keys[p], admin))
        except ImportError:
            traceback.print_exc()
            failed.append(f"{p}: import")
            continue
        for name, check in checks:
            t0 = time.perf_counter()
            try:
                check()
            except Exception:  # noqa: BLE001 - every failure is reported, then the next check runs
                print(f"FAIL {name}", flush=True)
                print(f"--- {name}", file=sys.stderr)
                traceback.print_exc()
                failed.append(name)
            else:
                passed += 1
                print(f"ok {name} ({(time.perf_counter() - t0) * 1000:.0f} ms)", flush=True)
    print(f"checks took {time.perf_counter() - started:.1f} s")
    print(f"sdk: {passed} passed, {len(failed)} failed")
    if failed:
        print("failed: " + "; ".join(failed), file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
