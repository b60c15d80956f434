#!/usr/bin/env python3
"""Drives the providers' official Python SDKs through the emulator's Batch APIs and checks
that every answer parses into the SDK's own types: a completed batch with its results, and a
cancelled one.

    scripts/test --test it emulator_bulk     # runs it (tests/it/emulator_bulk.rs)
    target/sdk-venv/bin/python emulator/sdk/check_batch.py http://127.0.0.1:PORT [--key KEY] [--providers openai,...]

The emulator serves the providers under the prefixes `openai`, `azure` (through the openai
SDK's `AzureOpenAI`: Azure OpenAI's global batch), `anthropic` and `gemini`, on real time,
with a batch timing that leaves a cancel sent right after the create in validating (the test
sets 1 s validating, 0.5 s processing): each check polls every 50 ms until its batch has
ended.

- openai / azure: `files.create` (purpose `batch`), `files.retrieve`, `batches.create`,
  `batches.retrieve` until `completed`, `files.content` of the output and error files (each
  line's `response.body` a `ChatCompletion`, or an error body for a request the API refused),
  `batches.list`, `batches.cancel` and the cancelled batch's partial output, `files.delete`.
- anthropic: `messages.batches.create|retrieve|results|list|cancel|delete`, each result a
  `MessageBatchIndividualResponse` (succeeded with a `Message`, errored, canceled).
- gemini: google-genai's `batches.create(model=…, src=[inline requests])`, `batches.get` until
  `JOB_STATE_SUCCEEDED`, the inlined responses (`GenerateContentResponse`s, in input order,
  with their metadata), `batches.list`, `batches.cancel`, `batches.delete`; the raw operation
  validated against google-genai's `BatchJob` (which forbids unknown fields) after its own
  `_BatchJob_from_mldev` conversion.

Objects are validated strictly as check.py does (its `strict`): the raw JSON against the
SDK's pydantic model. Nothing leaves the loopback address (check.py's guards). Each check
prints `ok NAME (MS ms)`; the run ends with `N passed, M failed` and exits non-zero when a
check failed (2 when an SDK is missing).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import traceback
import urllib.parse
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from check import (  # noqa: E402 - check.py is this file's sibling
    _loopback,
    expect,
    guard_network,
    installed,
    scrub_environment,
    strict,
)

PROVIDERS = ("openai", "azure", "anthropic", "gemini")
POLL_S = 0.05
DEADLINE_S = 20.0


def wait(what: str, read, done):
    """Calls `read` every 50 ms until `done(value)`; the value."""
    deadline = time.monotonic() + DEADLINE_S
    while True:
        value = read()
        if done(value):
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not done after {DEADLINE_S} s: {value}")
        time.sleep(POLL_S)


def prompts(n: int) -> list[tuple[str, str]]:
    return [(f"item-{i}", f"Say something about the number {i}") for i in range(n)]


# --------------------------------------------------------------------------------------------
# OpenAI and Azure OpenAI: files + batches.


def openai_batch_checks(client, model: str, endpoint: str, label: str):
    from openai.types import Batch, FileDeleted, FileObject
    from openai.types.chat import ChatCompletion

    def jsonl(items, bad=()):
        lines = []
        for cid, text in items:
            body = {"model": model, "messages": [{"role": "user", "content": text}]}
            if cid in bad:
                body = {"model": model}  # no messages: the API refuses this request
            lines.append(
                json.dumps({"custom_id": cid, "method": "POST", "url": endpoint, "body": body})
            )
        return ("\n".join(lines) + "\n").encode()

    def upload(data: bytes):
        raw = client.files.with_raw_response.create(file=("batch.jsonl", data), purpose="batch")
        f = raw.parse()
        expect(isinstance(f, FileObject), f"{type(f)}")
        strict(FileObject, raw.http_response.json())
        expect(f.purpose == "batch" and f.bytes == len(data), f)
        again = client.files.retrieve(f.id)
        strict(FileObject, again)
        expect(again.id == f.id, again)
        return f

    def create(file_id: str):
        raw = client.batches.with_raw_response.create(
            input_file_id=file_id,
            endpoint=endpoint,
            completion_window="24h",
            metadata={"check": label},
        )
        b = raw.parse()
        expect(isinstance(b, Batch), f"{type(b)}")
        strict(Batch, raw.http_response.json())
        expect(b.status == "validating" and b.metadata == {"check": label}, b)
        return b

    def retrieve(batch_id: str):
        raw = client.batches.with_raw_response.retrieve(batch_id)
        strict(Batch, raw.http_response.json())
        return raw.parse()

    def output_lines(file_id: str) -> list[dict]:
        meta = client.files.retrieve(file_id)
        strict(FileObject, meta)
        expect(meta.purpose == "batch_output", meta)
        text = client.files.content(file_id).text
        return [json.loads(line) for line in text.splitlines() if line.strip()]

    def completed():
        items = prompts(5)
        f = upload(jsonl(items, bad={"item-3"}))
        b = create(f.id)
        done = wait(f"{label} batch", lambda: retrieve(b.id), lambda x: x.status == "completed")
        expect(done.request_counts.total == 5, done.request_counts)
        expect(done.request_counts.completed == 4 and done.request_counts.failed == 1, done)
        expect(done.completed_at and done.in_progress_at and done.finalizing_at, done)
        expect(done.usage and done.usage.total_tokens > 0, done.usage)
        answers = output_lines(done.output_file_id)
        for line in answers:
            expect(line["error"] is None and line["response"]["status_code"] == 200, line)
            strict(ChatCompletion, line["response"]["body"])
            expect(line["id"].startswith("batch_req_"), line)
        ids = [line["custom_id"] for line in answers]
        expect(sorted(ids) == ["item-0", "item-1", "item-2", "item-4"], ids)
        expect(ids != sorted(ids), f"the output file is in input order: {ids}")
        errors = output_lines(done.error_file_id)
        expect([e["custom_id"] for e in errors] == ["item-3"], errors)
        expect(errors[0]["response"]["status_code"] == 400, errors[0])
        expect(errors[0]["response"]["body"]["error"]["type"] == "invalid_request_error", errors)
        page = client.batches.list(limit=10)
        for each in page.data:
            strict(Batch, each)
        expect(any(each.id == b.id for each in page.data), [each.id for each in page.data])
        deleted = client.files.delete(f.id)
        strict(FileDeleted, deleted)
        expect(deleted.deleted, deleted)

    def cancelled():
        f = upload(jsonl(prompts(8)))
        b = create(f.id)
        raw = client.batches.with_raw_response.cancel(b.id)
        strict(Batch, raw.http_response.json())
        c = raw.parse()
        expect(c.status in ("cancelling", "cancelled") and c.cancelling_at, c)
        end = wait(f"{label} cancel", lambda: retrieve(b.id), lambda x: x.status == "cancelled")
        expect(end.cancelled_at and end.request_counts.completed < 8, end)
        if end.output_file_id:  # what was done before the cancel is kept
            for line in output_lines(end.output_file_id):
                strict(ChatCompletion, line["response"]["body"])

    yield f"{label} batch: files.create, batches.create, retrieve, output and error files, list", completed
    yield f"{label} batch: cancel keeps what was done", cancelled


def openai_checks(root: str, key: str):
    import openai

    client = openai.OpenAI(base_url=f"{root}/openai/v1", api_key=key, max_retries=0, timeout=20)
    yield from openai_batch_checks(client, "gpt-4o-mini", "/v1/chat/completions", "openai")


def azure_checks(root: str, key: str):
    import openai

    client = openai.AzureOpenAI(
        azure_endpoint=f"{root}/azure",
        api_key=key,
        api_version="2024-10-21",
        max_retries=0,
        timeout=20,
    )
    # Azure's global batch: the deployment's name as each line's model, `/chat/completions`.
    yield from openai_batch_checks(client, "gpt-4o-mini-batch", "/chat/completions", "azure")


# --------------------------------------------------------------------------------------------
# Anthropic Message Batches.


def anthropic_checks(root: str, key: str):
    import anthropic
    from anthropic.types import Message
    from anthropic.types.messages import (
        DeletedMessageBatch,
        MessageBatch,
        MessageBatchIndividualResponse,
    )

    client = anthropic.Anthropic(base_url=f"{root}/anthropic", api_key=key, max_retries=0, timeout=20)
    model = "claude-sonnet-4-5"

    def requests(n: int, bad=()):
        out = []
        for cid, text in prompts(n):
            params = {"model": model, "max_tokens": 64, "messages": [{"role": "user", "content": text}]}
            if cid in bad:
                del params["max_tokens"]  # the API refuses this request
            out.append({"custom_id": cid, "params": params})
        return out

    def retrieve(batch_id: str):
        raw = client.messages.batches.with_raw_response.retrieve(batch_id)
        strict(MessageBatch, raw.http_response.json())
        return raw.parse()

    def results(batch_id: str) -> list:
        out = []
        for r in client.messages.batches.results(batch_id):
            expect(isinstance(r, MessageBatchIndividualResponse), f"{type(r)}")
            strict(MessageBatchIndividualResponse, r)
            if r.result.type == "succeeded":
                strict(Message, r.result.message)
            out.append(r)
        return out

    def completed():
        raw = client.messages.batches.with_raw_response.create(requests=requests(5, bad={"item-2"}))
        strict(MessageBatch, raw.http_response.json())
        b = raw.parse()
        expect(b.processing_status == "in_progress" and b.results_url is None, b)
        expect(b.request_counts.processing == 5, b.request_counts)
        done = wait("anthropic batch", lambda: retrieve(b.id), lambda x: x.processing_status == "ended")
        expect(done.request_counts.succeeded == 4 and done.request_counts.errored == 1, done)
        expect(done.ended_at and done.results_url.endswith(f"/{b.id}/results"), done)
        got = results(b.id)
        ids = [r.custom_id for r in got]
        expect(sorted(ids) == [f"item-{i}" for i in range(5)], ids)
        expect(ids != sorted(ids), f"the results are in input order: {ids}")
        bad = [r for r in got if r.custom_id == "item-2"][0]
        expect(bad.result.type == "errored", bad)
        expect(bad.result.error.error.type == "invalid_request_error", bad)
        page = client.messages.batches.list(limit=10)
        for each in page.data:
            strict(MessageBatch, each)
        expect(any(each.id == b.id for each in page.data), page.data)
        deleted = client.messages.batches.delete(b.id)
        strict(DeletedMessageBatch, deleted)

    def cancelled():
        b = client.messages.batches.create(requests=requests(8))
        raw = client.messages.batches.with_raw_response.cancel(b.id)
        strict(MessageBatch, raw.http_response.json())
        c = raw.parse()
        expect(c.processing_status in ("canceling", "ended") and c.cancel_initiated_at, c)
        end = wait("anthropic cancel", lambda: retrieve(b.id), lambda x: x.processing_status == "ended")
        counts = end.request_counts
        expect(counts.canceled >= 1 and counts.succeeded + counts.canceled == 8, counts)
        kinds = {r.result.type for r in results(b.id)}
        expect("canceled" in kinds and kinds <= {"canceled", "succeeded"}, kinds)

    yield "anthropic message batch: create, retrieve, results (succeeded, errored), list, delete", completed
    yield "anthropic message batch: cancel keeps what was done", cancelled


# --------------------------------------------------------------------------------------------
# Gemini batch mode.


def gemini_checks(root: str, key: str):
    from google import genai
    from google.genai import batches as genai_batches
    from google.genai import types

    base = f"{root}/gemini"
    opts = types.HttpOptions(base_url=base, api_version="v1beta", timeout=20_000)
    client = genai.Client(api_key=key, http_options=opts)
    model = "gemini-2.0-flash"

    def raw_operation(name: str) -> dict:
        req = urllib.request.Request(f"{base}/v1beta/{name}", headers={"x-goog-api-key": key})
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        with opener.open(req, timeout=10) as resp:
            return json.loads(resp.read())

    def strict_job(name: str):
        """The raw Operation, converted by google-genai itself, against `BatchJob`."""
        return types.BatchJob.model_validate(genai_batches._BatchJob_from_mldev(raw_operation(name)))

    def inline(n: int):
        return [
            {
                "contents": [{"parts": [{"text": text}], "role": "user"}],
                "metadata": {"key": cid},
            }
            for cid, text in prompts(n)
        ]

    def get(name: str):
        job = client.batches.get(name=name)
        expect(isinstance(job, types.BatchJob), f"{type(job)}")
        strict_job(name)
        return job

    def completed():
        job = client.batches.create(model=model, src=inline(4), config={"display_name": "check"})
        expect(isinstance(job, types.BatchJob), f"{type(job)}")
        expect(job.name.startswith("batches/") and job.display_name == "check", job)
        expect(job.state == types.JobState.JOB_STATE_PENDING, job.state)
        done = wait("gemini batch", lambda: get(job.name), lambda j: j.done)
        expect(done.state == types.JobState.JOB_STATE_SUCCEEDED, done.state)
        strict_job(job.name)
        responses = done.dest.inlined_responses
        expect([r.metadata["key"] for r in responses] == [f"item-{i}" for i in range(4)], responses)
        for r in responses:
            expect(isinstance(r.response, types.GenerateContentResponse), f"{type(r.response)}")
            expect(r.response.text and r.error is None, r)
        listed = list(client.batches.list(config={"page_size": 10}))
        expect(any(j.name == job.name for j in listed), [j.name for j in listed])
        client.batches.delete(name=job.name)

    def cancelled():
        job = client.batches.create(model=model, src=inline(4))
        client.batches.cancel(name=job.name)
        end = wait("gemini cancel", lambda: get(job.name), lambda j: j.done)
        expect(end.state == types.JobState.JOB_STATE_CANCELLED and end.end_time, end)

    yield "gemini batch: create with inline requests, get, inlined responses, list, delete", completed
    yield "gemini batch: cancel", cancelled


CHECKS = {
    "openai": openai_checks,
    "azure": azure_checks,
    "anthropic": anthropic_checks,
    "gemini": gemini_checks,
}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("url", help="the emulator's root URL, e.g. http://127.0.0.1:4010")
    parser.add_argument("--key", default="emulator-key", help="every provider's key")
    parser.add_argument(
        "--providers", default=",".join(PROVIDERS), help="comma-separated, of " + ", ".join(PROVIDERS)
    )
    args = parser.parse_args()
    root = args.url.rstrip("/")
    if not _loopback(urllib.parse.urlsplit(root).hostname):
        parser.error(f"{root} is not a loopback URL: the check only talks to 127.0.0.1")
    providers = [p.strip() for p in args.providers.split(",") if p.strip()]
    unknown = sorted(set(providers) - set(PROVIDERS))
    if unknown:
        parser.error(f"unknown providers {unknown}; choose from {list(PROVIDERS)}")

    scrub_environment()
    guard_network()
    versions = installed(providers)
    print("sdk " + " ".join(f"{d}=={v}" for d, v in versions.items()))

    passed, failed = 0, []
    for p in providers:
        for name, check in CHECKS[p](root, args.key):
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
    print(f"sdk: {passed} passed, {len(failed)} failed")
    if failed:
        print("failed: " + "; ".join(failed), file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
