"""``rewardserve serve [--config models.yaml] [--model NAME=SOURCE ...] [--host H] [--port P]``
``rewardserve grpo --config grpo.yaml [--policy ...] [--steps N]``"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys

from pydantic import ValidationError

from rewardserve.client import __version__
from rewardserve.service.logs import configure_logging
from rewardserve.service.settings import StartupError


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="rewardserve", description="Reward-model serving.")
    parser.add_argument("--version", action="version", version=f"rewardserve {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)
    serve = commands.add_parser("serve", help="run the HTTP service")
    serve.add_argument("--config", help="YAML file with a 'models:' list")
    serve.add_argument(
        "--model", action="append", default=[], metavar="NAME=SOURCE[:KIND]",
        help="serve SOURCE (a local path or hub id) as NAME, of KIND when given; repeatable",
    )
    serve.add_argument("--kind", help="the kind of the --model sources that name none")
    serve.add_argument("--host", help="bind address (default 127.0.0.1)")
    serve.add_argument("--port", type=int, help="port (default 8000)")
    serve.add_argument("--no-builtin-rules", action="store_true", help="do not serve math / exact_match")
    serve.add_argument("--keep-going", action="store_true",
                       help="serve the models that load; by default one that fails stops the service")
    serve.add_argument("--log-level", help="debug, info, warning, error")
    serve.add_argument("--log-format", choices=["text", "json"], help="log lines as text (default) or JSON")
    grpo = commands.add_parser("grpo", help="train a causal LM with GRPO on the service's rewards")
    grpo.add_argument("--config", help="YAML with the GRPO settings (client/grpo/config.py)")
    grpo.add_argument("--policy", help="the policy: a local path or hub id")
    grpo.add_argument("--prompts", help="JSONL of prompts")
    grpo.add_argument("--output-dir")
    grpo.add_argument("--service", help="service URL(s), comma-separated")
    grpo.add_argument("--steps", type=int)
    return parser


def grpo(args: argparse.Namespace) -> None:
    from rewardserve.client.grpo.config import load_config
    from rewardserve.client.grpo.loop import train

    overrides = {"policy": args.policy, "prompts": args.prompts, "output_dir": args.output_dir,
                 "service": args.service, "steps": args.steps}
    history = train(load_config(args.config, overrides))
    if history:
        print(json.dumps(history[-1]))


def serve(args: argparse.Namespace) -> None:
    # oneDNN caches a kernel per input shape. With a new sequence length in nearly every
    # batch that cache alone held ~200 MB at 1,024 entries; packed rows now come in a few
    # hundred shapes, built at load (cpu_linear.py), and must all fit. Read when torch loads.
    os.environ.setdefault("ONEDNN_PRIMITIVE_CACHE_CAPACITY", "1024")
    # OMP_WAIT_POLICY stays OpenMP's default (spin briefly, then sleep). PASSIVE (sleep at
    # once) puts a futex wake-up in front of every parallel op, which is slower with all
    # torch work on one thread (service/served_models.py); bench/results/design-measurements.md.
    from rewardserve.service.server import run
    from rewardserve.service.settings import Settings, parse_model_arg

    overrides = {
        key: value
        for key, value in {
            "config": args.config,
            "host": args.host,
            "port": args.port,
            "log_level": args.log_level,
            "log_format": args.log_format,
        }.items()
        if value is not None
    }
    if args.no_builtin_rules:
        overrides["builtin_rules"] = False
    if args.keep_going:
        overrides["keep_going"] = True
    settings = Settings(**overrides)
    configure_logging(settings.log_level, settings.log_format)
    if args.model:
        settings.models = settings.models + [parse_model_arg(a, args.kind) for a in args.model]
    raise SystemExit(run(settings))


def main(argv: list[str] | None = None) -> None:
    args = _parser().parse_args(argv)
    try:
        COMMANDS[args.command](args)
    except StartupError as exc:
        for problem in exc.problems:
            print(f"rewardserve: error: {problem}", file=sys.stderr)
        raise SystemExit(2) from exc
    except (ValueError, KeyError, FileNotFoundError, ValidationError) as exc:
        print(f"rewardserve: error: {one_line(exc)}", file=sys.stderr)
        raise SystemExit(2) from exc


def one_line(exc: Exception) -> str:
    if isinstance(exc, ValidationError):
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first.get("loc", ())) or exc.title
        more = f" (and {exc.error_count() - 1} more)" if exc.error_count() > 1 else ""
        return f"{where}: {first.get('msg')}{more}"
    return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__


COMMANDS = {"serve": serve, "grpo": grpo}


if __name__ == "__main__":
    main()
