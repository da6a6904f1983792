"""A run of ``rewardserve eval``: rows scored a chunk at a time, with a progress bar and
an ETA on stderr; each chunk's lines are written as they come, so Ctrl-C loses at most
the chunk in flight and the same command resumes after the last line written (the rows
already scored are not sent again; ``--retry-invalid`` sends the invalid ones again).
A request the service refuses (a row over the model's length, an unreadable image) is
sent again row by row, so the refusal marks only its own row invalid.

``--compare`` is in cli/eval_compare.py. An output folder belongs to one run
(``run.json``: the model, the format and the input file's digest); a different run into
it is refused rather than mixed in.
"""

from __future__ import annotations

import hashlib
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from rewardserve.cli import evaluate as ev
from rewardserve.cli.score import Progress, lines_written, read_items
from rewardserve.client import AsyncRewardClient
from rewardserve.client.errors import APIStatusError

CHUNK_ROWS = 32  # rows per request: what a Ctrl-C can lose
# Rows with images go a few at a time: each row sends its image once per response, and the
# service caps the pixels of one request.
VISION_CHUNK_ROWS = 4
IMAGE_FORMATS = frozenset({"vl-rewardbench"})


@dataclass(frozen=True)
class EvalOutput:
    """Where a format's run writes, and what it names its files."""

    lines: str
    summary: str
    figure: str


PAIRS_OUTPUT = EvalOutput("pairs.jsonl", "accuracy.json", "accuracy.png")
BENCHMARK_OUTPUT = EvalOutput("rows.jsonl", "results.json", "results.png")


def output_of(fmt: str) -> EvalOutput:
    return PAIRS_OUTPUT if fmt == "pairs" else BENCHMARK_OUTPUT


def run_identity(model: str, fmt: str, source: Path) -> dict[str, Any]:
    return {"model": model, "format": fmt, "input_sha256": hashlib.sha256(source.read_bytes()).hexdigest()}


def resumed_lines(out_dir: Path, fmt: str, identity: dict[str, Any]) -> list[dict[str, Any]]:
    """The lines a stopped run of the same model, format and input left in ``out_dir``
    (a torn last line cut off); ValueError naming what differs when the folder holds
    another run's lines (of any format). An empty lines file holds nothing to keep."""
    held = [out_dir / o.lines for o in (PAIRS_OUTPUT, BENCHMARK_OUTPUT) if _has_lines(out_dir / o.lines)]
    if held:
        try:
            previous = json.loads((out_dir / "run.json").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            previous = None
        if previous != identity:
            if not isinstance(previous, dict):
                said = "its run.json is missing or unreadable"
            else:
                said = ", ".join(
                    f"{key} {previous.get(key)!r}, not {value!r}"
                    for key, value in identity.items()
                    if previous.get(key) != value
                )
            raise ValueError(
                f"{out_dir} holds the rows of another run ({said}); choose another -o, or delete it to start over"
            )
    path = out_dir / output_of(fmt).lines
    return lines_written(path) if _has_lines(path) else []


def _has_lines(path: Path) -> bool:
    return path.is_file() and path.stat().st_size > 0


async def model_setup(client: AsyncRewardClient, model: str) -> dict[str, Any]:
    """What RewardBench records beside its numbers: the chat template the served model
    renders with (its tokenizer's, by digest) and the longest input it reads. Items over
    it are not cut but invalid (``truncate: error``), so they are counted, not scored."""
    cards = {card.name: card for card in (await client.models()).data}
    card = cards.get(model)
    if card is None:
        return {"chat_template": None, "chat_template_sha256": None, "max_length": None, "truncate": "error"}
    return {
        "chat_template": "tokenizer" if card.chat_template_sha256 else None,
        "chat_template_sha256": card.chat_template_sha256,
        "max_length": card.max_tokens,
        "truncate": "error",
        "model_kind": card.kind,
        "model_source": card.source,
    }


async def run_model(
    client: AsyncRewardClient,
    model: str,
    fmt: str,
    source: Path,
    out_dir: Path,
    threshold: float = 0.5,
    strict: bool = False,
    stream: TextIO | None = None,
    retry_invalid: bool = False,
) -> dict[str, Any]:
    """Score ``source``'s rows on ``model`` into ``out_dir`` (resuming a stopped run of
    the same rows; ``retry_invalid``: its invalid rows sent again) and write the summary
    and figure; returns the summary."""
    rows = read_items(source)
    problems: list[str | None] = ev.checked_rows(fmt, rows, strict) if fmt != "pairs" else [None] * len(rows)
    if fmt == "pairs":
        for number, row in enumerate(rows, 1):
            ev.pair_items(row, number)  # a line that is not a pair stops the run, named
    setup = await model_setup(client, model)
    # The same name serving another checkpoint is another run: its rows are not resumed.
    identity = {**run_identity(model, fmt, source), "model_source": setup.get("model_source")}
    files = output_of(fmt)
    done = resumed_lines(out_dir, fmt, identity)
    if len(done) > len(rows):
        raise ValueError(f"{out_dir} has {len(done)} lines for {len(rows)} rows: not a run of {source}")
    stream = stream or sys.stderr
    retried = [line["index"] for line in done if not line.get("valid", True)] if retry_invalid else []
    if done:
        again = f"; {len(retried)} invalid ones sent again" if retried else ""
        stream.write(f"{out_dir}: resuming after {len(done)} of {len(rows)} rows{again}\n")
    # A judge (a verifier) is asked JudgeBench's pairs as a judge is: both orders, each decided.
    judge = fmt == "judgebench" and setup.get("model_kind") == "verifier"
    chunk = VISION_CHUNK_ROWS if fmt in IMAGE_FORMATS else CHUNK_ROWS

    async def scored(indices: list[int]) -> list[dict[str, Any]]:
        """The lines of these rows, sent together; where the service refuses the request
        (a row over the model's length, an image it cannot read), each row alone, so the
        refusal marks only its own row invalid."""
        picked = [rows[i] for i in indices]
        try:
            if fmt == "pairs":
                return await ev.pair_lines_at(client, model, picked, indices)
            got = await ev.benchmark_scores(client, model, fmt, picked, [problems[i] for i in indices], judge)
            return [ev.benchmark_line(i, row, s, judge) for i, row, s in zip(indices, picked, got)]
        except APIStatusError as exc:
            if exc.status_code not in (413, 422):
                raise
            if len(indices) == 1:
                (i,) = indices
                why = f"{exc.status_code} {exc.type}: {exc.message}"
                if fmt == "pairs":
                    return [{**ev.pair_line(i, rows[i]), "valid": False, "error": why}]
                return [ev.benchmark_line(i, rows[i], why, judge)]
            return [line for i in indices for line in await scored([i])]

    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "run.json").write_text(json.dumps(identity) + "\n", encoding="utf-8")
    lines = list(done)
    for start in range(0, len(retried), chunk):
        for line in await scored(retried[start : start + chunk]):
            lines[line["index"]] = line
    if retried:  # the file again whole, the retried rows in their places
        temporary = out_dir / (files.lines + ".tmp")
        temporary.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
        temporary.replace(out_dir / files.lines)
    progress = Progress(len(rows), len(done), stream, counted_from=len(done), unit="rows")
    f: TextIO | None = None  # opened with the first answer: a failed first call leaves no lines file
    try:
        for start in range(len(done), len(rows), chunk):
            end = min(start + chunk, len(rows))
            new = await scored(list(range(start, end)))
            if f is None:
                f = open(out_dir / files.lines, "a", encoding="utf-8")  # noqa: SIM115 (closed below)
            f.write("".join(json.dumps(line) + "\n" for line in new))
            f.flush()
            lines += new
            progress.update(end)
    finally:
        if f is not None:
            f.close()
    if not rows:
        progress.update(0)
    out = summarise(model, fmt, rows, lines, problems, threshold)
    out["setup"] = setup
    (out_dir / files.summary).write_text(json.dumps(out, indent=2) + "\n", encoding="utf-8")
    if fmt == "pairs":
        ev.plot_accuracy(out, out_dir / files.figure)
    else:
        ev.plot_benchmark(out, out_dir)
    return out


def summarise(
    model: str,
    fmt: str,
    rows: list[dict[str, Any]],
    lines: list[dict[str, Any]],
    problems: list[str | None],
    threshold: float,
) -> dict[str, Any]:
    if fmt == "pairs":
        return ev.pairs_summary(model, lines)
    return ev.benchmark_summary(model, fmt, rows, lines, problems, threshold)


def headline(fmt: str, summary: dict[str, Any]) -> float | None:
    """The one number a run is ranked by: accuracy on pairs, else the benchmark's score."""
    value = summary["accuracy"] if fmt == "pairs" else summary["score"]
    return None if value is None else float(value)
