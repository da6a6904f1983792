"""``rewardserve eval --compare A B``: both models' runs side by side, and B - A with a
paired bootstrap 95% interval.

Paired means the same rows for both: the difference is read on the rows both models
scored (a row one of them could not score is left out of both, and counted), and each
bootstrap resample draws row indices once for both models (scipy.stats.bootstrap over
the indices). Each resample computes only the benchmark's headline number, from per-row
parts worked out once (a step benchmark's per-row counts), not its whole summary.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rewardserve.cli.eval_run import headline, output_of, run_model, summarise
from rewardserve.cli.score import lines_written, read_items, table
from rewardserve.client import AsyncRewardClient

BOOTSTRAP_RESAMPLES = 1000


def headline_reader(
    fmt: str, rows: list[dict[str, Any]], lines: list[dict[str, Any]], threshold: float
) -> Callable[[list[int]], float | None]:
    """The benchmark's headline number over a list of row indices (repeats allowed)."""
    from rewardserve.cli import step_benchmarks as sb

    scores: list[list[float | None]] = [line.get("scores") or [] for line in lines]
    if fmt == "prmbench":
        import numpy as np

        counts = np.array([list(sb.step_counts([(row, s)], threshold).values()) for row, s in zip(rows, scores)])
        keys = list(sb.step_counts([], threshold))
        return lambda picked: sb.prm_score(dict(zip(keys, counts[picked].sum(axis=0).tolist())))["prm_score"]
    if fmt == "processbench":
        hits = [sb.processbench_hit(row, s, threshold) for row, s in zip(rows, scores)]
        return lambda picked: sb.mean_f1([hits[i] for i in picked])

    def read(picked: list[int]) -> float | None:
        sub = [rows[i] for i in picked]
        return headline(fmt, summarise("", fmt, sub, [lines[i] for i in picked], [None] * len(sub), threshold))

    return read


def paired_bootstrap(
    fmt: str,
    rows: list[dict[str, Any]],
    lines_a: list[dict[str, Any]],
    lines_b: list[dict[str, Any]],
    threshold: float,
    resamples: int = BOOTSTRAP_RESAMPLES,
    seed: int = 0,
) -> tuple[float, float] | None:
    """The 95% percentile interval of score(B) - score(A) over these rows (every one
    scored by both), both read on the same resampled rows each time. None when there
    are too few rows, or a resample has no number (a benchmark needing what it lacks)."""
    import numpy as np
    from scipy.stats import bootstrap

    read_a = headline_reader(fmt, rows, lines_a, threshold)
    read_b = headline_reader(fmt, rows, lines_b, threshold)

    def difference(indices: Any) -> float:
        picked = [int(i) for i in indices]
        a, b = read_a(picked), read_b(picked)
        return float("nan") if a is None or b is None else b - a

    if len(rows) < 2 or math.isnan(difference(np.arange(len(rows)))):
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
    low, high = (float(x) for x in result.confidence_interval)
    return None if math.isnan(low) or math.isnan(high) else (low, high)


async def compare_models(
    client: AsyncRewardClient,
    models: tuple[str, str],
    fmt: str,
    source: Path,
    out_dir: Path,
    threshold: float = 0.5,
    strict: bool = False,
    retry_invalid: bool = False,
) -> dict[str, Any]:
    """Both models' runs (``out_dir/A``, ``out_dir/B``, each resumable) and
    ``compare.json``: each one's score alone, and on the rows both scored, B - A with
    its paired bootstrap interval."""
    a, b = models
    if a == b:
        raise ValueError("--compare takes two different models")
    alone = {}
    for name in models:
        folder = out_dir / safe_name(name)
        alone[name] = headline(
            fmt, await run_model(client, name, fmt, source, folder, threshold, strict, retry_invalid=retry_invalid)
        )
    rows = read_items(source)
    lines_a, lines_b = (lines_written(out_dir / safe_name(name) / output_of(fmt).lines) for name in models)
    both = [i for i, (x, y) in enumerate(zip(lines_a, lines_b)) if x.get("valid", True) and y.get("valid", True)]
    sub_rows = [rows[i] for i in both]
    sub_a, sub_b = [lines_a[i] for i in both], [lines_b[i] for i in both]
    on_both = {
        name: headline_reader(fmt, sub_rows, sub, threshold)(list(range(len(both)))) if both else None
        for name, sub in ((a, sub_a), (b, sub_b))
    }
    difference = None if None in on_both.values() else on_both[b] - on_both[a]  # type: ignore[operator]
    out = {
        "format": fmt,
        "models": [a, b],
        "scores": alone,  # each model on the rows it scored, as its own run reports it
        "rows": len(rows),
        "rows_both_scored": len(both),
        "scores_on_both": on_both,
        "difference": difference,  # B - A on the rows both scored
        "interval_95": paired_bootstrap(fmt, sub_rows, sub_a, sub_b, threshold) if difference is not None else None,
        "resamples": BOOTSTRAP_RESAMPLES,
    }
    (out_dir / "compare.json").write_text(json.dumps(out, indent=2, allow_nan=False) + "\n", encoding="utf-8")
    return out


def safe_name(model: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in model) or "_"


def compare_table(out: dict[str, Any]) -> str:
    a, b = out["models"]

    def shown(value: float | None) -> str:
        return "-" if value is None else f"{value:.4f}"

    interval = out["interval_95"]
    rows = [
        ("model", "alone", f"on the {out['rows_both_scored']} of {out['rows']} rows both scored"),
        (a, shown(out["scores"][a]), shown(out["scores_on_both"][a])),
        (b, shown(out["scores"][b]), shown(out["scores_on_both"][b])),
        (f"{b} - {a}", "", shown(out["difference"])),
        (
            f"95% interval (paired bootstrap, {out['resamples']} resamples)",
            "",
            "-" if interval is None else f"[{interval[0]:.4f}, {interval[1]:.4f}]",
        ),
    ]
    return table(rows)
