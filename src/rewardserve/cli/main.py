"""``rewardserve serve [--config models.yaml] [--model NAME=SOURCE[:KIND] ...] [--host H] [--port P]``
``rewardserve score --model NAME IN.jsonl -o OUT.jsonl [--url URL | --config models.yaml]``
``rewardserve eval --model NAME PAIRS.jsonl -o DIR [--url URL | --config models.yaml]``
``rewardserve models [--config models.yaml]``, ``rewardserve paths``, ``rewardserve demo-models DIR``
``rewardserve grpo --config grpo.yaml [--policy ...] [--steps N] [--no-resume]``"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from rewardserve.cli.eval_command import eval_arguments
from rewardserve.cli.grpo_command import grpo, grpo_arguments, grpo_plot
from rewardserve.client import RewardServeError, __version__

if TYPE_CHECKING:
    from rewardserve.models.spec import ModelSpec
    from rewardserve.service.settings import Settings

SERVE_EXTRA = "pip install 'rewardserve[serve]'"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="rewardserve", description="Reward-model serving.")
    parser.add_argument("--version", action="version", version=f"rewardserve {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)
    serve = commands.add_parser("serve", help="run the HTTP service")
    serve.add_argument("--config", help="YAML file with a 'models:' list")
    serve.add_argument(
        "--model",
        action="append",
        default=[],
        metavar="[NAME=]SOURCE[:KIND]",
        help="serve SOURCE (a local path or hub id) as NAME (by default the hub id, or the "
        "directory's name), of KIND when given; repeatable",
    )
    add_model_flags(serve)
    serve.add_argument("--host", help="bind address (default 127.0.0.1; 0.0.0.0 for trainers on other hosts)")
    serve.add_argument("--port", type=int, help="port (default 8000)")
    serve.add_argument(
        "--api-key",
        action="append",
        dest="api_keys",
        metavar="KEY",
        help="require this bearer key (repeatable); REWARDSERVE_API_KEYS keeps keys out of `ps`",
    )
    serve.add_argument(
        "--admin-key",
        action="append",
        dest="admin_keys",
        metavar="KEY",
        help="open the admin API (/v1/admin/: sleep, wake, load a version) to this key (repeatable; "
        "REWARDSERVE_ADMIN_KEYS keeps it out of `ps`)",
    )
    serve.add_argument(
        "--admin-port",
        type=int,
        help="the admin API on its own listener (on --admin-host, 127.0.0.1 by default), and only there",
    )
    serve.add_argument("--admin-host", help="where --admin-port listens")
    serve.add_argument("--no-builtin-rules", action="store_true", help="do not serve math / exact_match")
    serve.add_argument(
        "--keep-going",
        action="store_true",
        help="serve the models that load; by default one that fails stops the service",
    )
    serve.add_argument(
        "--unsafe-code-exec",
        action="store_true",
        help="where the code model's sandbox (bubblewrap) cannot start, run code without it: rlimits only",
    )
    serve.add_argument("--log-level", help="debug, info, warning, error")
    serve.add_argument("--log-format", choices=["text", "json"], help="log lines as text (default) or JSON")
    models = commands.add_parser("models", help="the kinds and presets, and what a config would serve")
    add_model_args(models)
    score = commands.add_parser("score", help="score a JSONL file of items, one result per line")
    score.add_argument("input", help="JSONL: one item per line (the /v1/score item shape)")
    score.add_argument(
        "-o", "--output", required=True, help="JSONL results, in input order; a re-run of the same run resumes"
    )
    score.add_argument("--overwrite", action="store_true", help="start over where -o holds another run's results")
    score.add_argument("--model", dest="name", help="the served model to score with (the judge for rubric)")
    score.add_argument("--endpoint", choices=["score", "steps", "verify", "rubric"], default="score")
    score.add_argument(
        "--options", default="{}", help='the endpoint\'s options as JSON, e.g. \'{"normalize": "group"}\''
    )
    add_service_args(score)
    evaluate = commands.add_parser("eval", help="a reward model's accuracy on preference pairs or a benchmark")
    eval_arguments(evaluate)
    add_service_args(evaluate)
    commands.add_parser("paths", help="the files to point verl and OpenRLHF at")
    demo = commands.add_parser(
        "demo-models", help="build small local stand-ins for the README's models, and a config serving them"
    )
    demo.add_argument("directory", help="where the models and models-demo.yaml go")
    grpo_arguments(
        commands.add_parser("grpo", help="train a causal LM with GRPO on the service's rewards"),
        commands.add_parser("grpo-plot", help="draw GRPO runs side by side (an outcome-only and a dense run)"),
    )
    return parser


def add_model_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", help="YAML file with a 'models:' list")
    parser.add_argument(
        "--model",
        action="append",
        default=[],
        metavar="[NAME=]SOURCE[:KIND]",
        help="a model as serve takes it; repeatable",
    )
    add_model_flags(parser)
    parser.add_argument("--no-builtin-rules", action="store_true", help="without math / exact_match")


# ModelSpec fields the command line sets for every --model source (models/spec.py).
MODEL_FLAGS = (
    "dtype",
    "device",
    "max_tokens",
    "backend",
    "revision",
    "tokenizer",
    "chat_template",
    "trust_remote_code",
)


def add_model_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--kind", help="the kind of the --model sources that name none")
    parser.add_argument("--dtype", help="of the --model sources: auto (default), float32, bfloat16, float16")
    parser.add_argument("--device", help="of the --model sources: auto (default), cpu, cuda, cuda:N")
    parser.add_argument("--max-tokens", type=int, help="of the --model sources: the longest item, in tokens")
    parser.add_argument("--backend", help="of the --model sources: auto (default), transformers, vllm")
    parser.add_argument("--revision", help="of the --model sources (hub ids): a branch, tag or commit")
    parser.add_argument("--tokenizer", help="of the --model sources: another tokenizer (a directory or hub id)")
    parser.add_argument("--chat-template", help="of the --model sources: a Jinja chat template, its text or file")
    parser.add_argument(
        "--trust-remote-code",
        action="store_true",
        default=None,
        help="of the --model sources: run the checkpoint's own Python (logged)",
    )


def command_line_models(args: argparse.Namespace, given: list[str]) -> list[ModelSpec]:
    """The ``--model`` arguments as specs, with the model flags applied to each."""
    from rewardserve.service.settings import parse_model_arg

    fields = {f: getattr(args, f) for f in MODEL_FLAGS if getattr(args, f, None) is not None}
    return [parse_model_arg(a, getattr(args, "kind", None), **fields) for a in given]


def add_service_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--url", help="a running service; without it the models are loaded here")
    parser.add_argument("--api-key", default=os.environ.get("REWARDSERVE_API_KEY"), help="for --url")
    parser.add_argument(
        "--serve",
        action="append",
        default=[],
        metavar="NAME=SOURCE[:KIND]",
        dest="serve_models",
        help="load this model here (no --url); repeatable, beside --config",
    )
    parser.add_argument("--config", help="YAML with the models to load here (no --url)")
    parser.add_argument("--log-level", default="warning")


def settings_from(args: argparse.Namespace, models: list[str], **overrides: object) -> Settings:
    from rewardserve.service.settings import Settings

    given = {"config": args.config, **overrides}
    settings = Settings(**{k: v for k, v in given.items() if v is not None})
    settings.models = settings.models + command_line_models(args, models)
    return settings


def configure_logging(level: str, fmt: str = "text") -> None:
    from rewardserve.service.observability.logs import configure_logging as configure

    configure(level, fmt)


def models(args: argparse.Namespace) -> None:
    need_serve()
    from rewardserve.cli.score import table
    from rewardserve.models import presets
    from rewardserve.models.kinds import build_checked, known_kinds

    print("kinds: " + ", ".join(known_kinds()))
    print("\npresets:")
    print(
        table(
            [
                ("name", "kind", "description"),
                *[(p["name"], p["kind"], p.get("description", "")) for p in presets.all_presets()],
            ]
        )
    )
    settings = settings_from(args, args.model, builtin_rules=False if args.no_builtin_rules else None)
    rows = [("model", "kind", "preset", "source", "status")]
    failing = []
    for spec in settings.model_specs():
        try:
            model = build_checked(spec)
            rows.append((spec.name, model.kind, model.preset_name or "-", spec.source, "ok"))
        except ValueError as exc:
            rows.append((spec.name, spec.kind or "?", spec.preset or "-", spec.source, str(exc)))
            failing.append(spec.name)
    print("\nthis configuration would serve:")
    print(table(rows))
    if failing:
        # A check run before serving (CI, a deploy step) must see the failure in its status.
        print(
            f"rewardserve: error: {len(failing)} of {len(rows) - 1} models would fail to load: {', '.join(failing)}",
            file=sys.stderr,
        )
        raise SystemExit(1)


def demo_models(args: argparse.Namespace) -> None:
    need("torch", "transformers", "tokenizers", "yaml", extra=SERVE_EXTRA, why="demo-models")
    from pathlib import Path

    from rewardserve.models.demo import write_demo_models

    config = write_demo_models(Path(args.directory), log=print)
    print(f"written {config}; serve them with: rewardserve serve --config {config}")


def paths(_: argparse.Namespace) -> None:
    from importlib.util import find_spec

    # Found, not imported: a trainer's own stack need not be installed here.
    for name, what in [
        ("verl", "custom_reward_function.path (verl)"),
        ("verl_dense", "reward.reward_manager.module.path, name TokenRewardManager (verl, token-level)"),
        ("openrlhf", "--remote_rm_url, python reward mode (OpenRLHF)"),
        ("trl", "reward_function / async_reward_function (TRL, import it)"),
    ]:
        spec = find_spec(f"rewardserve.client.integrations.{name}")
        print(f"{spec.origin if spec is not None else '?'}\t{what}")


def score(args: argparse.Namespace) -> None:
    import asyncio
    from pathlib import Path

    from rewardserve.cli.score import reward_client, score_file, summary, table

    configure_logging(args.log_level)
    if not args.url:
        need_serve("score without --url loads the models here")
    options = json.loads(args.options)
    if not isinstance(options, dict):
        raise ValueError("--options is a JSON object")
    if args.endpoint != "rubric" and not args.name:
        raise ValueError(f"--endpoint {args.endpoint} needs --model")

    async def scored() -> list[dict[str, Any]]:
        settings = None if args.url else settings_from(args, args.serve_models)
        async with reward_client(args.url, settings, args.api_key) as client:
            return await score_file(
                client,
                args.endpoint,
                args.name or "",
                options,
                Path(args.input),
                Path(args.output),
                service=args.url or served_here(args),
                overwrite=args.overwrite,
            )

    started = time.monotonic()
    results = asyncio.run(scored())
    print(table([*summary(results), ("seconds", f"{time.monotonic() - started:.1f}")]))


def served_here(args: argparse.Namespace) -> str:
    """The models loaded in process, as a run's record names its service."""
    from pathlib import Path

    config = str(Path(args.config).resolve()) if args.config else None
    return "in process: " + ", ".join([f"config {config}" if config else "built-in rules", *args.serve_models])


def evaluate(args: argparse.Namespace) -> None:
    from rewardserve.cli.eval_command import run_command

    configure_logging(args.log_level)
    if not args.url:
        need_serve("eval without --url loads the models here")
    settings = None if args.url else settings_from(args, args.serve_models, builtin_rules=False)
    run_command(args, settings)


def serve(args: argparse.Namespace) -> None:
    # oneDNN caches a kernel per input shape. With a new sequence length in nearly every
    # batch that cache alone grew to hundreds of MB; packed rows now come in a few hundred
    # shapes, built at load (cpu_linear.py), and must all fit. Read when torch loads.
    os.environ.setdefault("ONEDNN_PRIMITIVE_CACHE_CAPACITY", "1024")
    # OMP_WAIT_POLICY stays OpenMP's default (spin briefly, then sleep). PASSIVE (sleep at
    # once) puts a futex wake-up in front of every parallel op, which is slower with all
    # torch work on one thread (engine/registry.py); bench/results/design-measurements.md.
    need_serve()
    from rewardserve.service.server import run
    from rewardserve.service.settings import Settings

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
    if args.unsafe_code_exec:
        overrides["unsafe_code_exec"] = True
    if args.api_keys:
        overrides["api_keys"] = args.api_keys
    if args.admin_keys:
        overrides["admin_keys"] = args.admin_keys
    for field in ("admin_port", "admin_host"):
        if getattr(args, field) is not None:
            overrides[field] = getattr(args, field)
    settings = Settings(**overrides)
    configure_logging(settings.log_level, settings.log_format)
    if args.model:
        settings.models = settings.models + command_line_models(args, args.model)
    raise SystemExit(run(settings))


class MissingExtra(Exception):
    """A command needs packages of an extra that is not installed."""


def need(*modules: str, extra: str, why: str = "") -> None:
    from importlib.util import find_spec

    missing = [m for m in modules if find_spec(m) is None]
    if missing:
        raise MissingExtra(
            f"{why or 'this command'} needs {', '.join(missing)}, which {'is' if len(missing) == 1 else 'are'}"
            f" not installed: {extra}"
        )


def need_serve(why: str = "") -> None:
    need("torch", "transformers", "fastapi", "uvicorn", "yaml", "pydantic_settings", extra=SERVE_EXTRA, why=why)


def main(argv: list[str] | None = None) -> None:
    args = _parser().parse_args(argv)
    try:
        COMMANDS[args.command](args)
    except MissingExtra as exc:
        print(f"rewardserve: error: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
    except ValueError as exc:
        # A StartupError (service/settings.py) is a ValueError with every problem, a line each.
        for problem in getattr(exc, "problems", None) or [said(exc)]:
            print(f"rewardserve: error: {problem}", file=sys.stderr)
        raise SystemExit(2) from exc
    except (KeyError, OSError, RecursionError, ValidationError, RewardServeError) as exc:
        print(f"rewardserve: error: {said(exc)}", file=sys.stderr)
        raise SystemExit(2) from exc
    except KeyboardInterrupt:
        print("rewardserve: stopped", file=sys.stderr)
        raise SystemExit(130) from None


def said(exc: Exception) -> str:
    """An error as the command line tells its user: the first problem of a validation
    error with where it is, an OS error's reason, else the message's first line."""
    if isinstance(exc, ValidationError):
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first.get("loc", ())) or exc.title
        more = f" (and {exc.error_count() - 1} more)" if exc.error_count() > 1 else ""
        return f"{where}: {first.get('msg')}{more}"
    if isinstance(exc, OSError) and exc.strerror:
        return f"{exc.filename}: {exc.strerror}" if exc.filename else exc.strerror
    if isinstance(exc, RecursionError):
        return "the input is nested too deeply"
    return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__


COMMANDS = {
    "serve": serve,
    "grpo": grpo,
    "grpo-plot": grpo_plot,
    "models": models,
    "score": score,
    "eval": evaluate,
    "paths": paths,
    "demo-models": demo_models,
}


if __name__ == "__main__":
    main()
