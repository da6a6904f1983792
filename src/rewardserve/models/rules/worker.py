"""Where every rule runs: worker processes with a time limit, a memory limit per call and
no network (pool.py shares them between tenants and requests).

A rule is code run on text the client controls (sympy on a crafted formula, a
backtracking regex, a quadratic alignment); so is a request's template. None of it runs
in the serving process:

- each call runs in a pool worker (pebble, below the serving process in CPU priority) under
  ``RLIMIT_AS`` set to what the worker already maps plus ``memory_mb``; a call over it
  fails with MemoryError alone;
- workers are forked from a fork server that has the rules' libraries imported (not
  from the serving process, which holds torch threads and an event loop), so a worker
  killed for overrunning is back in a fraction of a second rather than the seconds a
  fresh interpreter importing sympy takes;
- a worker refuses every use of the network (an audit hook, PEP 578): no rule, schema
  or template can reach a host, the service's own port included.
"""

from __future__ import annotations

import multiprocessing
import os
import socket
import sys
import time
from dataclasses import dataclass, field
from typing import Any, Literal

# How a worker (and what it starts: a sandbox, its tests) stays below the serving process
# on the CPU. "nice": niceness 19, a small share of a core the forwards also want. "idle":
# Linux's SCHED_IDLE, run only on a core nothing else wants: a forward's thread that
# wakes is never kept waiting for a worker's time slice, and under a CPU-bound load a
# worker gets about a fifth of what nice 19 gets (its call's wall-clock limit may run out).
WorkerPriority = Literal["nice", "idle"]
DEFAULT_PRIORITY: WorkerPriority = "nice"  # the forwards keep a core; rules keep their wall clock
WORKER_NICENESS = 19
# Imported once by the fork server, shared by every worker forked from it ("__main__":
# a script's main module is imported there once, not again in every worker).
PRELOAD = (
    "__main__",
    "rewardserve.models.rules.worker",
    "rewardserve.models.rules.warm",
    "sacrebleu",
    "rouge_score.rouge_scorer",
    "rapidfuzz.fuzz",
    "jsonschema",
)


def worker_context() -> Any:
    """A fork server with PRELOAD imported where there is one (Linux), else spawn."""
    if "forkserver" not in multiprocessing.get_all_start_methods():
        return multiprocessing.get_context("spawn")
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(list(PRELOAD))
    return context


@dataclass(frozen=True)
class RuleCall:
    """A rule on one response. With ``variables``, the string ``args`` are templates the
    worker renders first (models/text/templating.py, bounded)."""

    rule: str
    response: str
    reference: Any
    args: dict[str, Any]
    variables: dict[str, Any] | None = None
    timeout_s: float | None = None  # the pool's own limit when None
    # A ``module:function`` rule (custom.py): the directory it is imported from, the
    # item's prompt text and its metadata (passed as columns).
    path: str | None = None
    prompt: str | None = None
    metadata: dict[str, Any] | None = None
    # The served model's own args (the rule's operator_args: a sandbox's bypass, caps),
    # apart from the request's ``args``, which never set them.
    operator_args: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class RenderCall:
    """A request's template rendered under the sandbox's limits."""

    source: str
    variables: dict[str, Any]


@dataclass(frozen=True)
class CallFailure:
    """Why a call has no result. ``kind``: ``rule`` (the rule cannot judge this input),
    ``item`` (a template field this item lacks), ``template`` (the template is over its
    limits) and ``limit`` (an input over the rule's caps, known once its args were
    rendered): the request's fault; ``timeout``, ``memory``, ``crashed``, ``cancelled``,
    ``error`` (the rule's own bug)."""

    kind: str
    message: str


def describe_failure(failure: CallFailure, subject: str) -> str:
    """A call's failure as its item's error: the rule's own words where it judged the
    input (``rule``, ``item``), else what happened to ``subject`` ("rule 'x'", "the
    template")."""
    if failure.kind in ("rule", "item"):
        return failure.message
    if failure.kind in ("timeout", "memory"):
        return f"{subject} {failure.message}"
    return f"{subject} failed: {failure.message}"


# ------------------------------------------------------------------ worker side

_memory_bytes = 0

# Audit events of the network (PEP 578): refused in every worker, whatever the rule or
# template, so no input can make a worker reach a host, the service's own port included.
# Unix sockets stay: a worker talks to its pool over one.
_NETWORK_EVENTS = frozenset(
    {
        "socket.connect",
        "socket.bind",
        "socket.sendto",
        "socket.sendmsg",
        "socket.getaddrinfo",
        "socket.gethostbyname",
        "socket.gethostbyaddr",
        "socket.getnameinfo",
        "urllib.Request",
    }
)


class NetworkRefused(PermissionError):
    """A rule or template tried to use the network from a pool worker."""


def _refuse_network(event: str, args: tuple[Any, ...]) -> None:
    if event == "socket.__new__":
        if len(args) > 1 and args[1] != getattr(socket, "AF_UNIX", None):
            raise NetworkRefused("rules run without network access")
    elif event in _NETWORK_EVENTS:
        address = args[1] if event.startswith("socket.") and len(args) > 1 else None
        if event in ("socket.connect", "socket.bind") and isinstance(address, (str, bytes)):
            return  # a Unix socket's path
        raise NetworkRefused("rules run without network access")


def _close_network() -> None:
    """From now on this process refuses the network (an audit hook cannot be removed)."""
    sys.addaudithook(_refuse_network)


def init_worker(memory_mb: int, warm: tuple[str, ...], priority: WorkerPriority = DEFAULT_PRIORITY) -> None:
    """Runs once per worker process, outside any call's time limit."""
    global _memory_bytes
    _memory_bytes = memory_mb * 1024 * 1024
    _close_network()
    # Below the serving process: a call that burns its whole time limit takes the cores
    # the forward passes leave, not the other way round.
    lower_priority(priority)
    import rewardserve.models.rules.warm  # noqa: F401 (done in the fork server already, where there is one)
    from rewardserve.models.rules import get_rule

    for name in warm:
        get_rule(name).warm()


def lower_priority(priority: WorkerPriority) -> None:
    """This process (and every process it starts after) below the serving process."""
    if priority == "idle":
        os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
    else:
        os.nice(WORKER_NICENESS)


def _mapped_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")


class _MemoryLimit:
    """``RLIMIT_AS`` at what is mapped now plus the budget, for one call."""

    def __enter__(self) -> _MemoryLimit:
        import resource

        self.previous = resource.getrlimit(resource.RLIMIT_AS)
        if _memory_bytes > 0:
            limit = _mapped_bytes() + _memory_bytes
            hard = self.previous[1]
            resource.setrlimit(
                resource.RLIMIT_AS, (limit if hard == resource.RLIM_INFINITY else min(limit, hard), hard)
            )
        return self

    def __exit__(self, *exc: object) -> None:
        import resource

        resource.setrlimit(resource.RLIMIT_AS, self.previous)


def _trim() -> None:
    import ctypes

    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except OSError:
        pass


def ready() -> bool:
    """Answered once a worker is up: the pool's sign that a replaced worker is back."""
    return True


def run_calls(calls: list[RuleCall | RenderCall]) -> list[Any]:
    """Worker entry point: each call's result (a float, a rendered string) or its
    CallFailure, in order."""
    return [_run_one(call) for call in calls]


def _run_one(call: RuleCall | RenderCall) -> Any:
    from rewardserve.models.errors import ItemError
    from rewardserve.models.rules import RuleError, Scored, get_rule, with_named_reference, without_operator_args
    from rewardserve.models.text.templating import TemplateLimitError, render_field_bounded

    try:
        with _MemoryLimit():
            if isinstance(call, RenderCall):
                return render_field_bounded(call.source, call.variables)
            rule = get_rule(call.rule)
            args, reference = call.args, call.reference
            if call.variables is not None:  # rendered only now: its caps checked only now
                reference, args = with_named_reference(reference, render_field_bounded(call.args, call.variables))
                problem = rule.check(call.response, reference, args)
                if problem is not None:
                    return CallFailure("limit", f"{problem.field}: {problem.message} ({call.rule})")
            if call.path is not None:  # the operator's own function, TRL's signature
                from rewardserve.models.rules.custom import call_reward, worker_function

                fn = worker_function(call.rule, call.path)
                return call_reward(fn, call.rule, call.prompt, call.response, reference, call.metadata, args)
            # Whatever the request's args (rendered templates included) hold, the operator's
            # own are the served model's.
            args = {**without_operator_args(rule, args), **call.operator_args}
            value = rule.fn(call.response, reference, **args)
            return value if isinstance(value, Scored) else float(value)  # a Scored keeps its reason
    except MemoryError:
        _trim()
        return CallFailure("memory", f"over its memory limit ({_memory_bytes // 2**20} MB)")
    except TemplateLimitError as exc:
        return CallFailure("template", str(exc))
    except ItemError as exc:
        return CallFailure("item", str(exc))
    except RuleError as exc:
        return CallFailure("rule", str(exc))
    except NetworkRefused as exc:
        return CallFailure("rule", str(exc))
    except Exception as exc:  # a rule's own bug stays with its call
        return CallFailure("error", f"{type(exc).__name__}: {exc}")


# Worker side: when the rule call running in this process must have answered (its
# pool's time limit from its start), or None outside a pool's call.
_call_deadline: float | None = None


def call_time_left() -> float | None:
    """Seconds before the rule call running in this worker is killed (its time limit),
    or None where no pool's call is running (a rule called directly)."""
    return None if _call_deadline is None else _call_deadline - time.monotonic()


def run_timed(calls: list[Any], timeout_s: float) -> list[Any]:
    """Worker entry point: each call run as run_calls runs it, each knowing
    its own time limit (``call_time_left``), so that a rule can answer before it; a
    chunk's calls each get the whole limit, since the pool retries a chunk that ran out
    one call at a time."""
    global _call_deadline
    results: list[Any] = []
    for call in calls:
        _call_deadline = time.monotonic() + timeout_s
        try:
            results += run_calls([call])
        finally:
            _call_deadline = None
    return results
