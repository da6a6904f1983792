"""Scoring a JSONL file from the command line: ``rewardserve score``.

The items go through the real service, either one running at ``--url`` or this
process's own app (``--config`` or the built-in rules) behind an in-memory transport,
so batching, limits and readouts are the service's. Results are written one per line
in input order, a block at a time; a re-run of the same model, options, service and
input (recorded beside the output, OUT.run.json) appends after the last line written.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import math
import os
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

import httpx

from rewardserve.client import AsyncRewardClient

ENDPOINTS = ("score", "steps", "verify", "rubric")
BLOCK = 512  # items per block: written (and resumable) one block at a time


@asynccontextmanager
async def reward_client(
    url: str | None, settings: Any = None, api_key: str | None = None, ready_timeout_s: float = 600.0
) -> AsyncIterator[AsyncRewardClient]:
    """A client of the service at ``url``, or of an in-process one built from
    ``settings`` (models loaded before the first call)."""
    if url is not None:
        async with AsyncRewardClient(url, api_key=api_key) as client:
            yield client
        return
    from rewardserve.service.app import create_app

    app = create_app(settings)
    async with app.router.lifespan_context(app):
        registry = app.state.svc.registry
        await asyncio.wait_for(registry.loaded.wait(), ready_timeout_s)
        if registry.failed:
            raise ValueError("; ".join(f"model {f}" for f in registry.failed))
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://rewardserve", timeout=None) as http:
            async with AsyncRewardClient("http://rewardserve", http_client=http) as client:
                yield client


ListCall = Callable[[list[dict[str, Any]]], Awaitable[Any]]


def call_for(client: AsyncRewardClient, endpoint: str, model: str, options: dict[str, Any]) -> ListCall:
    if endpoint == "score":
        return lambda items: client.score(model, items, **options)
    if endpoint == "steps":
        return lambda items: client.score_steps(model, items, **options)
    if endpoint == "verify":
        return lambda items: client.verify(model, items, **options)
    if endpoint == "rubric":
        return lambda items: client.rubric(
            items,
            judge=options.get("judge", model or None),
            criteria=options.get("criteria"),
            aggregation=options.get("aggregation"),
        )
    raise ValueError(f"--endpoint is one of {', '.join(ENDPOINTS)}")


MAX_LINE_BYTES = 16 * 1024 * 1024  # one item of a JSONL file


def read_items(path: Path) -> list[dict[str, Any]]:
    """The JSON objects of a JSONL file; ValueError naming the file and line for a line
    that is not one (too long, nested too deeply, not JSON), or for a path that is not a
    readable file."""
    if path.is_dir():
        raise ValueError(f"{path}: is a directory; give a JSONL file, one item per line")
    items = []
    with open(path, "rb") as f:
        for number, raw in enumerate(iter(lambda: f.readline(MAX_LINE_BYTES + 1), b""), 1):
            if len(raw) > MAX_LINE_BYTES:
                raise ValueError(f"{path}:{number}: the line is over {MAX_LINE_BYTES} bytes")
            if not raw.strip():
                continue
            try:
                item = json.loads(raw.decode("utf-8"))
            except RecursionError:
                raise ValueError(f"{path}:{number}: nested too deeply") from None
            except ValueError as exc:  # UnicodeDecodeError and JSONDecodeError alike
                raise ValueError(f"{path}:{number}: not JSON ({exc})") from None
            if not isinstance(item, dict):
                raise ValueError(f"{path}:{number}: an item is a JSON object")
            items.append(item)
    return items


def check_output(source: Path, out: Path) -> bool:
    """Whether ``out`` is a file this command may resume (a regular file or none);
    False for a stream (/dev/stdout, a pipe), written straight. ValueError when ``out``
    is the input itself."""
    if out.exists() and source.exists() and os.path.samefile(source, out):
        raise ValueError(f"{out} is the input file; write the results to another file (-o)")
    return not out.exists() or out.is_file()


def lines_written(path: Path) -> list[dict[str, Any]]:
    """The result lines a previous run wrote to ``path``; a torn last line (a run
    stopped while writing) is cut off the file. ValueError, touching nothing, when the
    file holds anything else: it is not this command's to overwrite."""
    if not path.exists():
        return []
    done: list[dict[str, Any]] = []
    kept = 0
    with open(path, "rb") as f:
        for raw in iter(lambda: f.readline(MAX_LINE_BYTES + 1), b""):
            line = _result_line(raw, len(done))
            if not raw.endswith(b"\n") and not f.read(1):
                break  # a torn last line: cut off below
            if line is None:
                raise _not_this_commands(path, len(done) + 1)
            done.append(line)
            kept += len(raw)
    os.truncate(path, kept)
    return done


def run_record_path(out: Path) -> Path:
    """Where a run records what it scored, beside its output (the output stays one
    result per line)."""
    return out.with_name(out.name + ".run.json")


def file_digest(path: Path) -> str:
    with open(path, "rb") as f:
        return "sha256:" + hashlib.file_digest(f, "sha256").hexdigest()


def check_same_run(out: Path, run: dict[str, Any]) -> None:
    """ValueError unless the results in ``out`` were written by a run of the same
    model, endpoint, options, service and input: resuming another run's file would
    print its old scores as this run's."""
    record_path = run_record_path(out)
    try:
        recorded = json.loads(record_path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        recorded = None
    if not isinstance(recorded, dict):
        if not _starts_with_a_result(out):  # not results at all: never this command's file
            raise _not_this_commands(out, 1)
        raise ValueError(
            f"{out} holds results with no record of the run that wrote them ({record_path}); "
            "choose another -o, or --overwrite to start over"
        )
    differ = [f"{key} {recorded.get(key)!r} (now {new!r})" for key, new in run.items() if recorded.get(key) != new]
    if differ:
        raise ValueError(
            f"{out} holds another run's results: its " + "; ".join(differ) + ". "
            "Choose another -o, or --overwrite to start over"
        )


def _result_line(raw: bytes, index: int) -> dict[str, Any] | None:
    """A line of this command's output: the result of item ``index``, else None."""
    try:
        line = json.loads(raw) if len(raw) <= MAX_LINE_BYTES else None
    except (ValueError, RecursionError):
        return None
    return line if isinstance(line, dict) and line.get("index") == index else None


def _not_this_commands(path: Path, line: int) -> ValueError:
    return ValueError(
        f"{path} exists and is not the output of this command (line {line}); "
        "choose another -o, or delete it to start over"
    )


def _starts_with_a_result(path: Path) -> bool:
    """Whether the file's first line is this command's first result line."""
    with open(path, "rb") as f:
        return _result_line(f.readline(MAX_LINE_BYTES + 1), 0) is not None


def blocks(items: list[dict[str, Any]], start: int, size: int) -> list[tuple[int, int]]:
    """[start, end) ranges of about ``size`` items that never split a group_id run, so a
    group's normalisation sees the whole group."""
    out = []
    while start < len(items):
        end = min(start + size, len(items))
        group = items[end - 1].get("group_id")
        while end < len(items) and group is not None and items[end].get("group_id") == group:
            end += 1
        out.append((start, end))
        start = end
    return out


@dataclass
class Progress:
    total: int
    done: int = 0
    stream: TextIO = field(default_factory=lambda: sys.stderr)
    started: float = field(default_factory=time.monotonic)
    counted_from: int = 0
    unit: str = "items"

    def update(self, done: int) -> None:
        self.done = done
        elapsed = time.monotonic() - self.started
        rate = (done - self.counted_from) / elapsed if elapsed > 0 else 0.0
        eta = (self.total - done) / rate if rate > 0 else float("inf")
        width = 30
        filled = int(width * done / self.total) if self.total else width
        eta_text = f"{eta:.0f}s" if math.isfinite(eta) else "?"
        end = "\n" if done >= self.total else ""
        self.stream.write(
            f"\r[{'#' * filled}{'.' * (width - filled)}] {done}/{self.total} {self.unit} "
            f"{rate:.1f} {self.unit}/s ETA {eta_text}  {end}"
        )
        self.stream.flush()


async def score_file(
    client: AsyncRewardClient,
    endpoint: str,
    model: str,
    options: dict[str, Any],
    source: Path,
    out: Path,
    progress_stream: TextIO | None = None,
    *,
    service: str = "in process",
    overwrite: bool = False,
) -> list[dict[str, Any]]:
    """Score ``source`` into ``out``, skipping the items a previous run of the same
    model, endpoint, options, ``service`` and input wrote (another run's file is
    refused, or replaced with ``overwrite``); returns every result line of ``out``."""
    items = read_items(source)
    resumable = check_output(source, out)
    run = {
        "model": model,
        "endpoint": endpoint,
        "options": options,
        "service": service,
        "input": file_digest(source),
        "items": len(items),
    }
    if resumable and not overwrite and out.exists() and out.stat().st_size > 0:
        check_same_run(out, run)
    written = lines_written(out) if resumable and not overwrite else []
    if len(written) > len(items):
        raise ValueError(f"{out} has {len(written)} results for {len(items)} items: not a run of {source}")
    # A group cut by the stop is scored again whole: its normalisation needs all of it.
    resume = len(written)
    while (
        0 < resume < len(items)
        and items[resume].get("group_id") is not None
        and items[resume - 1].get("group_id") == items[resume].get("group_id")
    ):
        resume -= 1
    if resume < len(written):
        written = written[:resume]
        out.write_text("".join(json.dumps(line) + "\n" for line in written), encoding="utf-8")
    stream = progress_stream or sys.stderr
    if resume:
        stream.write(f"{out}: resuming after {resume} results\n")
    # Opened with the first answer: a run whose first call fails (a closed port, an
    # unknown model) leaves no empty output behind.
    f: TextIO | None = None
    try:
        progress = Progress(len(items), resume, stream, counted_from=resume)
        call = call_for(client, endpoint, model, options)
        for start, end in blocks(items, resume, BLOCK):
            response = await call(items[start:end])
            if f is None:
                if resumable:
                    run_record_path(out).write_text(json.dumps(run, indent=1) + "\n", encoding="utf-8")
                f = open(out, "a" if resumable and not overwrite else "w", encoding="utf-8")  # noqa: SIM115 (closed below)
            for index, result in zip(range(start, end), response.results):
                line = {"index": index, **result.model_dump(exclude_none=True)}
                f.write(json.dumps(line) + "\n")
                written.append(line)
            f.flush()
            progress.update(end)
        if not items:
            progress.update(0)
            if resumable:
                run_record_path(out).write_text(json.dumps(run, indent=1) + "\n", encoding="utf-8")
            if overwrite or not out.exists():
                out.write_text("", encoding="utf-8")
    finally:
        if f is not None:
            f.close()
    return written


def summary(results: list[dict[str, Any]]) -> list[tuple[str, str]]:
    """Count, invalid, mean and percentiles of the scores, as (name, value) rows."""
    scores = sorted(float(r["score"]) for r in results if r.get("valid", True) and r.get("score") is not None)
    rows = [("items", str(len(results))), ("invalid", str(sum(1 for r in results if not r.get("valid", True))))]
    if scores:
        rows.append(("mean", f"{sum(scores) / len(scores):.4f}"))
        for q in (0, 10, 50, 90, 100):
            rows.append((f"p{q}", f"{percentile(scores, q):.4f}"))
    return rows


def percentile(ordered: list[float], q: float) -> float:
    """Linear interpolation between closest ranks (numpy's default)."""
    position = (len(ordered) - 1) * q / 100
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def table(rows: Sequence[Sequence[str]]) -> str:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in rows)
