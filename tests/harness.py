"""Running the service for tests: in-process (ASGI) and as a real uvicorn process."""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path

import httpx
from prometheus_client.parser import text_string_to_metric_families

from rewardserve.service.app import create_app
from rewardserve.service.settings import Settings


@asynccontextmanager
async def serve_in_process(settings: Settings) -> AsyncIterator[tuple[object, httpx.AsyncClient]]:
    """The real app with its lifespan, models loaded, behind httpx's ASGI transport."""
    app = create_app(settings)
    async with app.router.lifespan_context(app):
        await asyncio.wait_for(app.state.svc.registry.loaded.wait(), timeout=180)
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://rewardserve") as http:
            yield app, http


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def serve_subprocess(
    *args: str,
    env: dict[str, str] | None = None,
    log_path: Path | None = None,
    ready_timeout: float = 180.0,
    python: str | None = None,
) -> Iterator[str]:
    """``rewardserve serve`` in a real uvicorn process on 127.0.0.1 (run by ``python``,
    this interpreter by default); yields its URL."""
    with serve_process(*args, env=env, log_path=log_path, ready_timeout=ready_timeout, python=python) as (url, _):
        yield url


@contextmanager
def serve_process(
    *args: str,
    env: dict[str, str] | None = None,
    log_path: Path | None = None,
    ready_timeout: float = 180.0,
    python: str | None = None,
) -> Iterator[tuple[str, subprocess.Popen]]:
    """``serve_subprocess`` that yields the URL and the process."""
    port = free_port()
    log = open(log_path, "wb") if log_path else subprocess.DEVNULL
    proc = subprocess.Popen(
        [python or sys.executable, "-m", "rewardserve.cli", "serve", "--port", str(port), *args],
        # No drain by default: tests stop their servers at once (drain tests set their own).
        # No torch.compile at load: in-process tests and tests/models/backends/kernels
        # check the compiled layers; a process started for a test saves its seconds.
        env={
            **os.environ,
            "REWARDSERVE_DRAIN_SECONDS": "0",
            "REWARDSERVE_COMPILE": "false",
            "REWARDSERVE_GC_FREEZE": "true",
            **(env or {}),
        },
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_ready(url, proc, ready_timeout)
        yield url, proc
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
        if log_path:
            log.close()


def wait_ready(url: str, proc: subprocess.Popen, timeout: float, path: str = "/ready") -> None:
    """Until ``url + path`` answers 200; an error if ``proc`` exits or ``timeout`` passes."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode} before it was ready")
        try:
            if httpx.get(url + path, timeout=2).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.2)
    raise TimeoutError(f"{url} not ready after {timeout}s")


def metric(text: str, name: str, **labels: str) -> float:
    """Sum of the samples called ``name`` whose labels include ``labels``."""
    total = 0.0
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                total += sample.value
    return total


def item_of_tokens(model_dir, tokens: int, word: str = "apple") -> dict:
    """A prompt-less item whose chat-templated text is ``tokens`` tokens long, give or
    take a couple (queue and limit tests need sizes, not words). Items made of different
    ``word``s are distinct work: identical items in one request are computed once."""
    from transformers import AutoTokenizer

    from rewardserve.models.text.chat import render_chat
    from rewardserve.protocol import Item

    tok = AutoTokenizer.from_pretrained(model_dir)

    def size(words: int) -> int:
        item = Item(response=f"{word} " * words)
        return len(tok(render_chat(tok, item.conversation()))["input_ids"])

    words = 1
    while size(words) < tokens:
        words += 1
    return {"response": f"{word} " * words}


def run_jobs(model, entries: list) -> list:
    """A kind's prepared jobs run directly, each a unit of its own, bypassing the
    service; an entry that is already an ItemError comes back as it is."""
    from rewardserve.models.errors import ItemError
    from rewardserve.models.plan import Job, Unit

    jobs = [e for e in entries if isinstance(e, Job)]
    outputs = iter(model.run([Unit(job.length, job) for job in jobs]))
    return [e if isinstance(e, ItemError) else next(outputs)[0] for e in entries]


async def post(http, route: str, body: dict, status: int = 200):
    """POST ``body`` in process (an httpx client on the app); the JSON answer, after
    checking its status."""
    response = await http.post(route, json=body)
    assert response.status_code == status, response.text
    return response.json()
