"""The operator's own reward functions: ``module:function`` in place of a rule's name.

The function has TRL's reward-function signature, ``f(prompts, completions, **columns)
-> list[float | None]`` (GRPOTrainer calls reward functions so): each item is one call
with one-element lists, ``prompts=[prompt text or None]``, ``completions=[response]``,
``reference=[the item's reference]``, each of the item's ``metadata`` keys and each of the
criterion's / model's ``args`` as a one-element list too. The one value returned is the
score; None, a value of the wrong type or an exception makes that item invalid.

The module is imported from a directory (the current one, or the one a model names) or
from PYTHONPATH, and nowhere else: a request naming ``os:system`` is refused, as is
anything from the standard library or the installed packages. It is checked in the
serving process when the model is built (a rubric criterion may name only a function a
rule model serves: a request never chooses a module to import) and runs only in
the rule workers (worker.py), under the rules' time and memory limits and without
network, imported once per worker.
"""

from __future__ import annotations

import importlib
import importlib.util
import math
import numbers
import os
import re
import sys
import sysconfig
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rewardserve.models.rules import RuleError
from rewardserve.protocol import Item

RewardFn = Callable[..., Any]

# ``package.module:function`` (the function may be an attribute path: ``mod:Class.method``).
_NAME = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*:[A-Za-z_]\w*(\.[A-Za-z_]\w*)*$")
# Keywords a column may not take: they are the function's positional arguments.
_POSITIONAL = ("prompts", "completions")


class CustomFnError(ValueError):
    """A ``module:function`` that cannot be used: one line naming it and where it was looked for."""


# The functions the operator serves (rule models with a module:function source), by
# source: their directory. A rubric criterion may name these and no others, so that a
# request never makes the service import a module of its choosing. Filled as models are
# built at start-up.
_served: dict[str, str] = {}


def serve_function(source: str, directory: str) -> None:
    _served[source] = directory


def served_directory(source: str) -> str | None:
    """The directory of a function the operator serves; None for any other name."""
    return _served.get(source)


def is_custom(name: str) -> bool:
    """Whether a rule name is a ``module:function`` (the built-in rules have no ':')."""
    return _NAME.match(name) is not None


def search_directory(directory: str | Path | None = None) -> str:
    """The absolute directory a function is imported from (default: the current one)."""
    return str(Path(directory if directory is not None else os.getcwd()).resolve())


def _allowed_roots(directory: str) -> list[str]:
    roots = [directory, *(p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p)]
    return [str(Path(root).resolve()) for root in roots]


def _within(path: str, roots: list[str]) -> bool:
    resolved = Path(path).resolve()
    return any(resolved.is_relative_to(root) for root in roots)


def _python_roots() -> list[str]:
    """Where Python's own and the installed packages live: never a reward function's
    module, even when a virtual environment sits inside the directory searched."""
    paths = sysconfig.get_paths()
    roots = [paths[k] for k in ("stdlib", "platstdlib", "purelib", "platlib") if k in paths]
    roots += [sys.prefix, sys.base_prefix, sys.exec_prefix]
    return [str(Path(root).resolve()) for root in roots]


def _allowed(place: str | None, roots: list[str]) -> bool:
    return place is not None and os.path.isabs(place) and _within(place, roots) and not _within(place, _python_roots())


def _check_origin(source: str, module: str, directory: str) -> None:
    """The top-level package must come from the directory or PYTHONPATH, found without
    running it (a request may not name the standard library's or an installed package's
    functions)."""
    top = module.split(".")[0]
    with _on_path(directory):
        try:
            spec = importlib.util.find_spec(top)
        except (ImportError, ValueError) as exc:
            raise _not_found(source, directory, str(exc)) from None
    if spec is None:
        raise _not_found(source, directory, f"no module named {top!r}")
    places = [spec.origin] if spec.origin not in (None, "built-in", "frozen") else []
    places += list(spec.submodule_search_locations or [])
    roots = _allowed_roots(directory)
    if not places or not all(_allowed(place, roots) for place in places):
        where = places[0] if places else "Python itself"
        raise CustomFnError(
            f"cannot import {source!r}: module {top!r} comes from {where}, not from {directory} or PYTHONPATH "
            "(a reward function must be the operator's own module)"
        )


def _not_found(module: str, directory: str, why: str) -> CustomFnError:
    return CustomFnError(f"cannot import {module!r}: {why} (searched {directory} and PYTHONPATH)")


class _on_path:
    """``directory`` first on sys.path while a module is looked up (the serving process
    keeps its own path)."""

    def __init__(self, directory: str):
        self.directory = directory
        self.added = False

    def __enter__(self) -> None:
        if self.directory not in sys.path:
            sys.path.insert(0, self.directory)
            self.added = True

    def __exit__(self, *exc: object) -> None:
        if self.added:
            try:
                sys.path.remove(self.directory)
            except ValueError:
                pass


def load_function(source: str, directory: str | Path | None = None) -> RewardFn:
    """The function ``source`` names, imported from ``directory`` (the current one when
    None) or PYTHONPATH; CustomFnError, one line naming the source and the directory,
    when it cannot be."""
    where = search_directory(directory)
    if not is_custom(source):
        raise CustomFnError(f"{source!r} is not module:function (searched {where} and PYTHONPATH)")
    module_name, _, attribute = source.partition(":")
    _check_origin(source, module_name, where)
    with _on_path(where):
        try:
            value: Any = importlib.import_module(module_name)
        except ImportError as exc:
            raise _not_found(source, where, str(exc) or type(exc).__name__) from None
        except Exception as exc:  # the module's own error on import, one line
            first = str(exc).splitlines()[0] if str(exc) else ""
            raise CustomFnError(
                f"cannot import {source!r}: {type(exc).__name__}: {first} (searched {where} and PYTHONPATH)"
            ) from None
    for part in attribute.split("."):
        if not hasattr(value, part):
            raise CustomFnError(
                f"cannot import {source!r}: module {module_name!r} has no attribute {attribute!r} "
                f"(searched {where} and PYTHONPATH)"
            )
        value = getattr(value, part)
    if not callable(value):
        raise CustomFnError(
            f"cannot import {source!r}: {attribute!r} is a {type(value).__name__}, not a function "
            f"(searched {where} and PYTHONPATH)"
        )
    return value  # type: ignore[no-any-return]


def prompt_text(item: Item) -> str | None:
    """The item's prompt as text: ``prompt`` when a string, else the last user turn
    before the response (of ``prompt``'s messages or the conversation's); None without one."""
    if isinstance(item.prompt, str):
        return item.prompt
    turns = list(item.prompt or item.messages or [])
    if item.messages is not None:  # the response is the final assistant turn
        while turns and turns[-1].role == "assistant":
            turns.pop()
    user = [m for m in turns if m.role == "user"]
    return user[-1].text() if user else None


# ------------------------------------------------------------------ worker side

_loaded: dict[tuple[str, str], RewardFn] = {}
_on_sys_path: set[str] = set()


def worker_function(source: str, directory: str) -> RewardFn:
    """In a rule worker: the function, imported once per worker (its directory added to
    sys.path once)."""
    key = (source, directory)
    fn = _loaded.get(key)
    if fn is None:
        if directory not in _on_sys_path:
            sys.path.insert(0, directory)
            _on_sys_path.add(directory)
        fn = _loaded[key] = load_function(source, directory)
    return fn


def call_reward(
    fn: RewardFn,
    source: str,
    prompt: str | None,
    response: str,
    reference: Any,
    metadata: dict[str, Any] | None,
    args: dict[str, Any],
) -> float:
    """One item's score: the function called with one-element lists. An exception is
    the function's (its text is the item's error); BadResult for a result that is not
    one score."""
    columns = {k: [v] for k, v in (metadata or {}).items() if k not in _POSITIONAL}
    columns["reference"] = [reference]
    columns.update({k: [v] for k, v in args.items() if k not in _POSITIONAL})
    try:
        result = fn([prompt], [response], **columns)
    except (SystemExit, KeyboardInterrupt) as exc:  # the worker stays, the item fails
        raise RuntimeError(f"{type(exc).__name__}: {exc}") from None
    return score_of(result, source)


class BadResult(RuleError):
    """A reward function's result that is not one score: the item's error."""


def score_of(result: Any, source: str) -> float:
    if not isinstance(result, (list, tuple)):
        raise BadResult(f"{source} returned a {type(result).__name__}; expected a list of one float (or None)")
    if len(result) != 1:
        raise BadResult(f"{source} returned {len(result)} values for one completion; expected a list of one")
    (value,) = result
    if value is None:
        raise BadResult(f"{source}: the function returned None")
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise BadResult(f"{source} returned [{type(value).__name__}]; expected a float or None")
    score = float(value)
    if not math.isfinite(score):
        raise BadResult(f"{source} returned {score}, not a finite number")
    return score
