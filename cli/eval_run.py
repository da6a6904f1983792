"""A run of ``rewardserve eval``: rows scored a chunk at a time, with a progress bar and
an ETA on stderr; each chunk's lines are written as they come, so Ctrl-C loses at most
the chunk in flight and the same command resumes after the last line written (the rows
already scored are not sent again). ``--compare A B`` runs both models and puts them
side by side, with a paired bootstrap interval on the difference of their scores.

An output folder belongs to one run (``run.json``: the model, the format and the input
file's digest); a different run into it is refused rather than mixed in.
"""

from __future__ import annotations

import hashlib
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from rewardserve.cli import evaluate as ev
from rewardserve.cli.score import Progress, lines_written, read_items, table
from rewardserve.client import AsyncRewardClient

CHUNK_ROWS = 32  # rows per request: what a Ctrl-C can lose
BOOTSTRAP_RESAMPLES = 1000


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
    (a torn last line cut off); ValueError when the folder holds another run's lines."""
    path = out_dir / output_of(fmt).lines
    run_file = out_dir / "run.json"
    if not path.exists():
        return []
    try:
        previous = json.loads(run_file.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        previous = None
    if previous != identity:
        said = (
            f"model {previous.get('model')!r}, format {previous.get('format')!r}"
            if isinstance(previous, dict)
            else "no run.json"
        )
        raise ValueError(
            f"{out_dir} holds the rows of another run ({said}); choose another -o, or delete it to start over"
        )
    return lines_written(path)


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
) -> dict[str, Any]:
    """Score ``source``'s rows on ``model`` into ``out_dir`` (resuming a stopped run of
    the same rows) and write the summary and figure; returns the summary."""
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
    if done:
        stream.write(f"{out_dir}: resuming after {len(done)} of {len(rows)} rows\n")
    # A judge (a verifier) is asked JudgeBench's pairs as a judge is: both orders, each decided.
    judge = fmt == "judgebench" and setup.get("model_kind") == "verifier"
    progress = Progress(len(rows), len(done), stream, counted_from=len(done), unit="rows")
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "run.json").write_text(json.dumps(identity) + "\n", encoding="utf-8")
    lines = list(done)
    with open(out_dir / files.lines, "a", encoding="utf-8") as f:
        for start in range(len(done), len(rows), CHUNK_ROWS):
            end = min(start + CHUNK_ROWS, len(rows))
            if fmt == "pairs":
                new = await ev.pair_lines(client, model, rows[start:end], start)
            else:
                got = await ev.benchmark_scores(client, model, fmt, rows[start:end], problems[start:end], judge)
                new = [
                    ev.benchmark_line(start + k, row, s, judge) for k, (row, s) in enumerate(zip(rows[start:end], got))
                ]
            f.write("".join(json.dumps(line) + "\n" for line in new))
            f.flush()
            lines += new
            progress.update(end)
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


def paired_bootstrap(
    fmt: str,
    rows: list[dict[str, Any]],
    lines_a: list[dict[str, Any]],
    lines_b: list[dict[str, Any]],
    threshold: float,
    resamples: int = BOOTSTRAP_RESAMPLES,
    seed: int = 0,
) -> tuple[float, float] | None:
    """The 95% percentile interval of score(B) - score(A), both models read on the same
    resampled rows each time (scipy.stats.bootstrap, paired over row indices). None
    when either model has no score on the rows."""
    import numpy as np
    from scipy.stats import bootstrap

    problems: list[str | None] = [None] * len(rows)

    def difference(indices: Any) -> float:
        picked = [int(i) for i in indices]
        sub_rows = [rows[i] for i in picked]
        a = headline(fmt, summarise("a", fmt, sub_rows, [lines_a[i] for i in picked], problems, threshold))
        b = headline(fmt, summarise("b", fmt, sub_rows, [lines_b[i] for i in picked], problems, threshold))
        return float("nan") if a is None or b is None else b - a

    if len(rows) < 2 or np.isnan(difference(np.arange(len(rows)))):
        return None
    result = bootstrap(
        (np.arange(len(rows)),),
        difference,
        n_resamples=resamples,
        vectorized=False,
        method="percentile",
        confidence_level=0.95,
        rng=np.random.default_rng(seed),
    )
    low, high = result.confidence_interval
    return float(low), float(high)


async def compare_models(
    client: AsyncRewardClient,
    models: tuple[str, str],
    fmt: str,
    source: Path,
    out_dir: Path,
    threshold: float = 0.5,
    strict: bool = False,
) -> dict[str, Any]:
    """Both models' runs (``out_dir/A``, ``out_dir/B``, each resumable) and
    ``compare.json``: each one's score and B - A with its paired bootstrap interval."""
    a, b = models
    if a == b:
        raise ValueError("--compare takes two different models")
    summaries = {}
    for name in models:
        summaries[name] = await run_model(client, name, fmt, source, out_dir / safe_name(name), threshold, strict)
    rows = read_items(source)
    lines = [lines_written(out_dir / safe_name(name) / output_of(fmt).lines) for name in models]
    score_a, score_b = headline(fmt, summaries[a]), headline(fmt, summaries[b])
    interval = paired_bootstrap(fmt, rows, lines[0], lines[1], threshold)
    out = {
        "format": fmt,
        "models": [a, b],
        "scores": {a: score_a, b: score_b},
        "difference": None if score_a is None or score_b is None else score_b - score_a,
        "interval_95": interval,
        "resamples": BOOTSTRAP_RESAMPLES,
        "rows": len(rows),
    }
    (out_dir / "compare.json").write_text(json.dumps(out, indent=2) + "\n", encoding="utf-8")
    return out


def safe_name(model: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in model) or "_"


def compare_table(out: dict[str, Any]) -> str:
    a, b = out["models"]

    def shown(value: float | None) -> str:
        return "-" if value is None else f"{value:.4f}"

    interval = out["interval_95"]
    rows = [
        ("model", "score"),
        (a, shown(out["scores"][a])),
        (b, shown(out["scores"][b])),
        (f"{b} - {a}", shown(out["difference"])),
        (
            f"95% interval (paired bootstrap, {out['resamples']} resamples of {out['rows']} rows)",
            "-" if interval is None else f"[{interval[0]:.4f}, {interval[1]:.4f}]",
        ),
    ]
    return table(rows)
