"""``rewardserve eval``'s command line: its arguments, and a run's table and exit code
(cli/eval_run.py runs it)."""

from __future__ import annotations

import argparse
import importlib.util
import math
import sys
from pathlib import Path
from typing import Any

from rewardserve.cli.benchmarks import FORMATS


def eval_arguments(evaluate: argparse.ArgumentParser) -> None:
    evaluate.add_argument("input", help="JSONL: prompt, chosen, rejected (one or a list), optional subset")
    evaluate.add_argument(
        "-o",
        "--output",
        required=True,
        help="directory for the rows' lines, the summary and the figure (pairs: pairs.jsonl, accuracy.json, "
        "accuracy.png; a benchmark: rows.jsonl, results.json, results.png); a stopped run resumes there",
    )
    evaluate.add_argument("--model", dest="name", help="the served reward model")
    evaluate.add_argument(
        "--compare",
        nargs=2,
        metavar=("A", "B"),
        help="two served models side by side: B - A with a paired bootstrap 95%% interval",
    )
    evaluate.add_argument(
        "--format",
        dest="format",
        choices=FORMATS,
        default="pairs",
        help="pairs: accuracy on preference pairs; the others: the benchmark's rows and its own metric "
        "(cli/benchmarks.py)",
    )
    evaluate.add_argument(
        "--threshold",
        type=float,
        default=0.5,
        help="processbench: a step scored below it is the first error; prmbench: a step above it is valid",
    )
    evaluate.add_argument(
        "--retry-invalid",
        action="store_true",
        help="resuming: send again the rows that came back invalid (kept as they are by default)",
    )
    evaluate.add_argument(
        "--strict",
        action="store_true",
        help="a row that is not the benchmark's stops the run (default: named, skipped)",
    )


def run_command(args: argparse.Namespace, settings: Any) -> None:
    """The run (or the comparison) against ``--url`` or the models of ``settings``, its
    table on stdout; exit 1 when no row was scored, 130 on Ctrl-C (the same command
    resumes)."""
    import asyncio

    from rewardserve.cli import eval_compare, eval_run
    from rewardserve.cli.evaluate import accuracy_table, benchmark_table
    from rewardserve.cli.score import reward_client

    if bool(args.name) == bool(args.compare):
        raise ValueError("eval takes --model NAME, or --compare A B")
    if not math.isfinite(args.threshold):
        raise ValueError(f"--threshold is a number, not {args.threshold}")
    if args.compare and importlib.util.find_spec("scipy") is None:
        raise ValueError("--compare's bootstrap needs scipy: pip install scipy (or 'rewardserve[serve]')")
    source, out_dir = Path(args.input), Path(args.output)

    async def evaluated() -> dict[str, Any]:
        async with reward_client(args.url, settings, args.api_key) as client:
            if args.compare:
                return await eval_compare.compare_models(
                    client,
                    tuple(args.compare),
                    args.format,
                    source,
                    out_dir,
                    args.threshold,
                    args.strict,
                    args.retry_invalid,
                )
            return await eval_run.run_model(
                client,
                args.name,
                args.format,
                source,
                out_dir,
                args.threshold,
                args.strict,
                retry_invalid=args.retry_invalid,
            )

    try:
        out = asyncio.run(evaluated())
    except KeyboardInterrupt:
        print(f"\nrewardserve: stopped; the same command resumes from what is in {out_dir}", file=sys.stderr)
        raise SystemExit(130) from None
    if args.compare:
        print(eval_compare.compare_table(out))
        print(f"\nwritten to {out_dir}: compare.json, and each model's run in its own folder")
        if out["difference"] is None:
            print(
                "rewardserve: error: no row was scored by both models; each one's errors are in its folder",
                file=sys.stderr,
            )
            raise SystemExit(1)
        return
    files = eval_run.output_of(args.format)
    print(accuracy_table(out) if args.format == "pairs" else benchmark_table(out))
    print(f"\nwritten to {out_dir}: {files.lines}, {files.summary}, {files.figure}")
    if eval_run.headline(args.format, out) is None:  # a score of nothing is a failed run, not a result
        what = "pairs" if args.format == "pairs" else "rows"
        print(
            f"rewardserve: error: none of the {out[what]} {what} was scored; "
            f"each one's error is in {out_dir / files.lines} (--retry-invalid sends them again)",
            file=sys.stderr,
        )
        raise SystemExit(1)
