"""Thread hops per route: how often one request's work leaves the event loop and comes
back, counted where it happens (not read off the code).

    .venv/bin/python bench/handoffs.py [--out bench/results/issue-60-handoffs.md]

The demo's tiny models (models/demo/tiny.py: an outcome model, a PRM, a judge) and the
built-in rules (math, exact_match, the code model) are served in process; each route
gets one request, one at a time, and every hand-off on its path is recorded:

  thread    anyio.to_thread.run_sync: starlette's run_in_threadpool (the body parse in
            BoundedRoute, planning, finish, a route's encoding) and FastAPI's sync
            dependencies
  executor  loop.run_in_executor: the batcher's compute thread, asyncio.to_thread
  pool      RuleRunner.run: the rule pools' worker processes

A hop handed off from the event loop's thread counts; one handed off from a thread
already off the loop (a rule model's batch calling the pools) is nested, listed apart.
"in turn" is the longest chain of hops each handed off after the one before came back:
what one request waits through one after another. A batch's hop starts when its units
were queued (Batcher.submit), so the hops of one plan stage (units, calls, parts) are
side by side.

The same run checks that the models never call into the engine or the service on their
own: a profile hook (sys.setprofile) on the event loop's thread and inside every hop's
thread records each call from a ``rewardserve.models`` frame into ``rewardserve.engine``
or ``rewardserve.service`` code. Each must reach something the service lent the models
(the peers of a request, the rule pools of ModelContext, a unit's scope); anything else
fails the run. The pools' worker processes are not hooked (import-linter holds what
they import).
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import os
import platform
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")

# What a models frame may call in the engine or the service: what was lent to it.
LENT = {
    "rewardserve.engine.registry:ModelRegistry.lend.<locals>.lookup": "the request's peers (Lent.peers)",
    "rewardserve.engine.pools.runner:RuleRunner.run": "the rule pools (ModelContext.rules, RuleCalls)",
}
LENT_PREFIXES = {"rewardserve.engine.scope:RequestScope.": "a unit's scope (Unit.scope, Scope)"}
SKIPPED = ("starlette.concurrency", "anyio", "asyncio", "functools", "concurrent", __name__)


@dataclass
class Hop:
    kind: str
    target: str
    origin: str
    from_loop: bool
    start: float
    end: float | None = None

    def back(self) -> None:
        self.end = time.monotonic()

    @property
    def label(self) -> str:
        """Its short name in the table (the legend gives the full one)."""
        if self.kind == "executor" and self.target.endswith("Batcher._run_then_tidy"):
            return "forward"
        if self.kind == "pool":
            return "pool"
        if self.origin == "engine.executor:run_plan":
            return "plan"
        if self.origin == "engine.executor:execute":
            return "finish"
        parts = [p for p in self.target.split(":")[-1].split(".") if not p.startswith("<")]
        return parts[-1].lstrip("_") if parts else self.target

    @property
    def full(self) -> str:
        return f"{self.kind}: {self.target}, handed off by {self.origin}"


@dataclass
class Recorder:
    """What one request handed off, and the models' calls into the engine or service."""

    loop_thread: int = 0
    hops: list[Hop] | None = None
    edges: Counter[tuple[str, str]] = field(default_factory=Counter)
    queued: dict[int, float] = field(default_factory=dict)  # id(unit) -> when Batcher.submit took it

    def handed_off(self, kind: str, fn: Any, start: float | None = None) -> Hop | None:
        if self.hops is None:
            return None
        hop = Hop(kind, _name(fn), _origin(), threading.get_ident() == self.loop_thread, start or time.monotonic())
        self.hops.append(hop)
        return hop

    def profile(self, frame: FrameType, event: str, _arg: Any) -> None:
        if event != "call":
            return
        callee = frame.f_globals.get("__name__", "")
        if not callee.startswith(("rewardserve.engine", "rewardserve.service")):
            return
        caller = frame.f_back
        if caller is None or not caller.f_globals.get("__name__", "").startswith("rewardserve.models"):
            return
        self.edges[(_where(caller), _where(frame))] += 1

    def profiled(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        """``fn`` with the hook on in whatever thread runs it."""

        @functools.wraps(fn)
        def run(*args: Any, **kwargs: Any) -> Any:
            sys.setprofile(self.profile)
            try:
                return fn(*args, **kwargs)
            finally:
                sys.setprofile(None)

        return run


RECORDER = Recorder()


def _where(frame: FrameType) -> str:
    return f"{frame.f_globals.get('__name__', '?')}:{frame.f_code.co_qualname}"


def _name(fn: Any) -> str:
    while isinstance(fn, functools.partial):
        # asyncio.to_thread hands over partial(context.run, fn, ...)
        fn = fn.args[0] if getattr(fn.func, "__name__", "") == "run" and fn.args else fn.func
    fn = getattr(fn, "__wrapped__", fn)
    module = getattr(fn, "__module__", None) or "?"
    return f"{module.removeprefix('rewardserve.')}:{getattr(fn, '__qualname__', type(fn).__name__)}"


def _origin() -> str:
    """The first frame, outside the hand-off machinery, that handed the work off."""
    frame = sys._getframe(2)
    while frame is not None:
        module = frame.f_globals.get("__name__", "")
        if not module.startswith(SKIPPED):
            return f"{module.removeprefix('rewardserve.')}:{frame.f_code.co_qualname}"
        frame = frame.f_back  # type: ignore[assignment]
    return "?"


def instrument() -> None:
    """Wrap every place work leaves the event loop (see the module docstring)."""
    import anyio.to_thread

    from rewardserve.engine.batcher import Batcher
    from rewardserve.engine.pools.runner import RuleRunner

    run_sync = anyio.to_thread.run_sync

    async def recorded_run_sync(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        hop = RECORDER.handed_off("thread", fn)
        if hop is None:
            return await run_sync(fn, *args, **kwargs)
        try:
            return await run_sync(RECORDER.profiled(fn), *args, **kwargs)
        finally:
            hop.back()

    anyio.to_thread.run_sync = recorded_run_sync  # type: ignore[assignment]

    run_in_executor = asyncio.BaseEventLoop.run_in_executor

    def recorded_run_in_executor(loop: Any, executor: Any, fn: Callable[..., Any], *args: Any) -> Any:
        start = None
        if getattr(fn, "__name__", "") == "_run_then_tidy" and args:  # a batch: since its units were queued
            start = min((RECORDER.queued.get(id(unit), time.monotonic()) for unit in args[0]), default=None)
        hop = RECORDER.handed_off("executor", fn, start)
        if hop is None:
            return run_in_executor(loop, executor, fn, *args)
        future = run_in_executor(loop, executor, RECORDER.profiled(fn), *args)
        future.add_done_callback(lambda _f: hop.back())
        return future

    asyncio.BaseEventLoop.run_in_executor = recorded_run_in_executor  # type: ignore[method-assign]

    submit = Batcher.submit

    def recorded_submit(self: Batcher, units: list[Any], deadline: float | None = None) -> Any:
        now = time.monotonic()
        for unit in units:
            RECORDER.queued[id(unit)] = now
        return submit(self, units, deadline)

    Batcher.submit = recorded_submit  # type: ignore[method-assign]

    pool_run = RuleRunner.run

    def recorded_pool_run(self: RuleRunner, calls: list[Any], *args: Any, **kwargs: Any) -> Any:
        hop = RECORDER.handed_off("pool", pool_run)
        future = pool_run(self, calls, *args, **kwargs)
        if hop is not None:
            hop.target = "engine.pools.runner:RuleRunner.run, a request's calls together"
            future.add_done_callback(lambda _f: hop.back())
        return future

    RuleRunner.run = recorded_pool_run  # type: ignore[method-assign]


def in_turn(hops: list[Hop]) -> int:
    """The longest chain of hops each handed off after the one before came back."""
    depth: dict[int, int] = {}
    ordered = sorted(hops, key=lambda h: h.start)
    for i, hop in enumerate(ordered):
        before = [depth[j] for j in range(i) if (ordered[j].end or 0) <= hop.start]
        depth[i] = 1 + max(before, default=0)
    return max(depth.values(), default=0)


@dataclass(frozen=True)
class Case:
    route: str
    path: str
    body: dict[str, Any]
    note: str = ""


ITEM = {"prompt": "What is 2+2?", "response": "It is 4.", "reference": "4"}
TRAJECTORY = [
    {"role": "user", "content": "weather in Paris, in Fahrenheit"},
    {"role": "assistant", "tool_calls": [{"function": {"name": "weather", "arguments": '{"city": "Paris"}'}}]},
    {"role": "tool", "content": "18 C"},
    {"role": "assistant", "content": "64.4 F"},
]
JUDGED = {"name": "q", "text": "Is {{ item.reference }} the answer?"}  # a plain field lookup: rendered in process
RULE = {"name": "m", "fn": "exact_match", "args": {"reference": "4"}}
ROW = {
    "test": [
        {"input": {"stdin": "4\n"}, "output": {"stdout": "yes\n"}},
        {"input": {"stdin": "3\n"}, "output": {"stdout": "no\n"}},
    ]
}


def cases(policy_ids: list[int]) -> list[Case]:
    steps = {"steps_from": "separator", "separator": "\n\n"}
    return [
        Case("/v1/score", "/v1/score", {"model": "rm", "items": [ITEM]}),
        Case("/v1/score", "/v1/score", {"model": "math", "items": [ITEM]}, "a rule model"),
        Case(
            "/v1/score/steps",
            "/v1/score/steps",
            {"model": "prm", "items": [{"prompt": "2+2?", "steps": ["2+2", "= 4"]}]},
        ),
        Case(
            "/v1/score/steps",
            "/v1/score/steps",
            {
                "model": "prm",
                "items": [{"prompt": "2+2?", "response": "2+2\n\n= 4", "response_token_ids": policy_ids}],
                "options": {**steps, "policy_tokenizer": "policy"},
            },
            "options.policy_tokenizer",
        ),
        Case(
            "/v1/score/turns",
            "/v1/score/turns",
            {"items": [{"messages": TRAJECTORY, "reference": [{"name": "weather", "arguments": {"city": "Paris"}}]}]},
        ),
        Case("/pooling", "/pooling", {"model": "prm", "input": "2+2<extra_0>= 4<extra_0>"}),
        Case("/v1/verify", "/v1/verify", {"model": "judge", "items": [ITEM]}),
        Case(
            "/v1/rubric",
            "/v1/rubric",
            {"judge": "judge", "items": [ITEM], "criteria": [JUDGED, RULE]},
            "a rule and a judge question (plain template)",
        ),
        Case(
            "/v1/rubric",
            "/v1/rubric",
            {"judge": "judge", "items": [ITEM], "criteria": [JUDGED, RULE, {"name": "r", "model": "rm"}]},
            "and a model criterion",
        ),
        Case(
            "/v1/rubric",
            "/v1/rubric",
            {
                "judge": "judge",
                "items": [ITEM],
                "criteria": [{**JUDGED, "text": "Is {{ item.reference | upper }} the answer?"}, RULE],
            },
            "judge text rendered in the pool",
        ),
        Case(
            "/v1/rubric",
            "/v1/rubric",
            {"items": [ITEM], "criteria": [RULE, {**RULE, "name": "n", "fn": "math_equiv"}]},
            "rules only",
        ),
        Case("/v1/compare", "/v1/compare", {"model": "rm", "items": [{"prompt": "2+2?", "responses": ["4", "5"]}]}),
        Case("/classify", "/classify", {"model": "rm", "input": ["2+2 is 4, says the classifier"]}),
        Case("/v1/embeddings", "/v1/embeddings", {"model": "rm", "input": ["2+2 is 4, says the embedder"]}),
        Case("/get_reward", "/get_reward?model=rm", {"query": ["2+2 is 4, says OpenRLHF"]}),
        Case("/tokenize", "/tokenize", {"model": "rm", "prompt": "2+2 is 4"}),
        Case("/run_code", "/run_code", {"code": "print(1 + 2)", "language": "python"}),
        Case(
            "/submit",
            "/submit",
            {
                "dataset": "mine",
                "id": 1,
                "completion": "```python\nn = int(input())\nprint('yes' if n % 2 == 0 else 'no')\n```",
                "config": {"dataset_type": "CommonOJDataset", "language": "python", "provided_data": ROW},
            },
        ),
    ]


@dataclass
class Measured:
    case: Case
    status: int
    hops: list[Hop]

    @property
    def from_loop(self) -> list[Hop]:
        return [h for h in self.hops if h.from_loop]

    @property
    def nested(self) -> list[Hop]:
        return [h for h in self.hops if not h.from_loop]


async def measure(directory: Path) -> list[Measured]:
    from transformers import AutoTokenizer

    from rewardserve.models.demo import TINY_OPTIONS, tiny
    from rewardserve.models.spec import ModelSpec
    from rewardserve.service.settings import Settings
    from tests.harness import serve_in_process

    rm = tiny.build_sequence_classifier(directory / "rm", "qwen3")
    prm = tiny.build_qwen2_prm(directory / "prm")
    judge = tiny.build_qwen3_lm(directory / "judge")
    uncached = {**TINY_OPTIONS, "score_cache_size": 0}  # every request computes
    settings = Settings(
        models=[
            ModelSpec(name="rm", kind="outcome", source=str(rm), options=uncached),
            ModelSpec(name="prm", source=str(prm), options=uncached),
            ModelSpec(name="judge", kind="verifier", source=str(judge), options=uncached),
        ],
        builtin_rules=True,
        policy_tokenizers={"policy": str(judge)},
        log_level="warning",
    )
    policy_ids = AutoTokenizer.from_pretrained(judge)("2+2\n\n= 4", add_special_tokens=False)["input_ids"]
    measured = []
    async with serve_in_process(settings) as (_app, http):
        RECORDER.loop_thread = threading.get_ident()
        for case in cases(policy_ids):
            RECORDER.hops = hops = []
            sys.setprofile(RECORDER.profile)
            try:
                answer = await http.post(case.path, json=case.body, timeout=120)
            finally:
                sys.setprofile(None)
                RECORDER.hops = None
            if answer.status_code != 200:
                raise SystemExit(f"{case.path} ({case.note}): {answer.status_code} {answer.text[:400]}")
            measured.append(Measured(case, answer.status_code, hops))
    return measured


def lent_as(callee: str) -> str | None:
    if callee in LENT:
        return LENT[callee]
    return next((why for prefix, why in LENT_PREFIXES.items() if callee.startswith(prefix)), None)


def cpu_model() -> str:
    try:
        lines = subprocess.run(["lscpu"], capture_output=True, text=True, check=True).stdout.splitlines()
    except (OSError, subprocess.CalledProcessError):
        return platform.processor() or "unknown"
    return next((line.split(":", 1)[1].strip() for line in lines if line.startswith("Model name")), "unknown")


def report(measured: list[Measured]) -> str:
    import torch

    out = [
        "# Thread hops per route (issue 60)",
        "",
        f"{cpu_model()}, {os.cpu_count()} CPUs; Python {platform.python_version()}, torch {torch.__version__}; "
        "the demo's tiny models served in process, one request per row. Hops from the loop: each time the "
        "request's work left the event loop for a thread or process and came back; in turn: the longest chain "
        "of them one after another (hops of one plan stage run side by side); nested: hops handed off from a "
        "thread already off the loop.",
        "",
        "    .venv/bin/python bench/handoffs.py",
        "",
        "| route | request | hops from the loop | in turn | the hops, in the order handed off | nested |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    legend: dict[str, set[str]] = {}
    for m in measured:
        for hop in m.hops:
            legend.setdefault(hop.label, set()).add(hop.full)
        order = ", ".join(h.label for h in sorted(m.from_loop, key=lambda h: h.start))
        nested = ", ".join(h.label for h in m.nested) or "-"
        counts = f"{len(m.from_loop)} | {in_turn(m.from_loop)}"
        out.append(f"| `{m.case.route}` | {m.case.note or '-'} | {counts} | {order} | {nested} |")
    out += ["", "The hops by name:", "", "| name | what, and where it was handed off |", "| --- | --- |"]
    for label, fulls in legend.items():
        out.append(f"| {label} | {'; '.join(sorted(fulls))} |")
    out += [
        "",
        "Calls from `rewardserve.models` into `rewardserve.engine` / `rewardserve.service` seen on these requests:",
        "",
    ]
    edges = Counter[tuple[str, str]](RECORDER.edges)
    if not edges:
        out.append("none")
    else:
        out += ["| caller (models) | callee | calls | lent as |", "| --- | --- | --- | --- |"]
        for (caller, callee), count in sorted(edges.items()):
            out.append(f"| {caller} | {callee} | {count} | {lent_as(callee) or 'NOT LENT'} |")
    return "\n".join(out) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, help="also write the table here")
    args = parser.parse_args()
    import torch  # noqa: F401  (imported before the hooks: its import is no request's)
    import transformers  # noqa: F401

    instrument()
    with tempfile.TemporaryDirectory() as tmp:
        measured = asyncio.run(measure(Path(tmp)))
    text = report(measured)
    print(text)
    if args.out is not None:
        args.out.write_text(text)
    unlent = [edge for edge in RECORDER.edges if lent_as(edge[1]) is None]
    assert not unlent, f"models called into the engine or the service unlent: {unlent}"


if __name__ == "__main__":
    main()
