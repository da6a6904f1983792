"""``rewardserve grpo`` and ``grpo-plot``: their arguments, and the runs (the loop itself is
train/grpo/loop.py)."""

from __future__ import annotations

import argparse
import json
import logging
import os


def grpo_arguments(grpo: argparse.ArgumentParser, plot: argparse.ArgumentParser) -> None:
    grpo.add_argument("--config", help="YAML with the GRPO settings (train/grpo/config.py)")
    grpo.add_argument("--policy", help="the policy: a local path or hub id")
    grpo.add_argument("--prompts", help="JSONL of prompts")
    grpo.add_argument("--output-dir")
    grpo.add_argument("--service", help="service URL(s), comma-separated")
    grpo.add_argument("--steps", type=int)
    grpo.add_argument("--no-resume", action="store_true", help="start over even if output-dir has checkpoints")
    grpo.add_argument(
        "--dense", metavar="MODEL", help="add token-level process advantages from this served PRM or implicit PRM"
    )
    grpo.add_argument(
        "--turns",
        action="store_true",
        help="mix turn-level advantages of tool calls (matched to each prompt's tool_calls) with the trajectory's",
    )
    grpo.add_argument(
        "--colocate",
        action="store_true",
        help="the reward models sleep while the policy generates (admin_key in the config, or REWARDSERVE_ADMIN_KEY)",
    )
    grpo.add_argument(
        "--update-rm-every",
        type=int,
        metavar="N",
        help="every N steps push the newest checkpoint folder under --rm-checkpoints to the reward model",
    )
    grpo.add_argument("--rm-checkpoints", metavar="DIR", help="where a trainer saves the reward model's checkpoints")
    plot.add_argument("runs", nargs="+", help="the runs' output directories (each with its metrics.jsonl)")
    plot.add_argument("-o", "--output", default="grpo-runs.png", help="the PNG to write")


def grpo(args: argparse.Namespace) -> None:
    from rewardserve.cli.main import configure_logging, need

    need("torch", "transformers", "yaml", extra="pip install 'rewardserve[grpo]'")
    from rewardserve.models.checkpoints import checkpoint_problem, go_offline_if_unreachable
    from rewardserve.train.grpo.config import load_config
    from rewardserve.train.grpo.loop import train

    configure_logging("info")
    for chatty in ("httpx", "httpcore"):  # a line per reward request would bury the progress bar
        logging.getLogger(chatty).setLevel(logging.WARNING)
    overrides = {
        "policy": args.policy,
        "prompts": args.prompts,
        "output_dir": args.output_dir,
        "service": args.service,
        "steps": args.steps,
        "resume": False if args.no_resume else None,
        "dense": {"model": args.dense} if args.dense else None,
        "turns": {} if args.turns else None,
        "colocate": True if args.colocate else None,
        "admin_key": os.environ.get("REWARDSERVE_ADMIN_KEY") if args.colocate or args.update_rm_every else None,
        "rm_updates": {"every": args.update_rm_every, "checkpoints": args.rm_checkpoints}
        if args.update_rm_every
        else None,
    }
    config = load_config(args.config, overrides)
    problem = checkpoint_problem(config.policy)  # in seconds, not after the hub's retries
    if problem is not None:
        raise ValueError(f"policy: {problem}")
    go_offline_if_unreachable([config.policy])
    history = train(config)
    if history:
        print(json.dumps(history[-1]))
    from pathlib import Path

    out = Path(config.output_dir)
    steps = [int(p.name.split("-", 1)[1]) for p in out.glob("checkpoint-*") if p.name.split("-", 1)[1].isdigit()]
    last = f", checkpoint-{max(steps)}/ (the policy, for from_pretrained)" if steps else ""
    print(f"written to {out}: metrics.jsonl, metrics.png{last}")


def grpo_plot(args: argparse.Namespace) -> None:
    from pathlib import Path

    from rewardserve.train.grpo.plot import plot_runs

    runs = {}
    for run in args.runs:
        metrics = Path(run) / "metrics.jsonl"
        if not metrics.is_file():
            raise ValueError(f"{run}: no metrics.jsonl (the output directory of a rewardserve grpo run)")
        rows = [json.loads(line) for line in metrics.read_text(encoding="utf-8").splitlines() if line.strip()]
        runs[Path(run).name or run] = rows
    plot_runs(runs, Path(args.output))
    print(f"written to {args.output}: {', '.join(f'{name} ({len(rows)} steps)' for name, rows in runs.items())}")
