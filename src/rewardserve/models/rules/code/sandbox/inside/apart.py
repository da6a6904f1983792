"""Assert-style tests (human-eval's ``check``, MBPP's asserts) with the completion in a
process of its own.

Run in one process, such a test is the completion's to win: it can return an object
whose ``__eq__`` is always true, or a subclass of ``int`` that equals anything, or leave
with exit status 0 before the asserts run, and the test passes. So the test's own code
(the reference's setup, prompt and asserts) runs in a trusted process, and the
completion's code in a new interpreter started from it (a fork would share the
test's memory, expected values and all); the test calls the completion's functions over a
pair of pipes. What comes back is data only: the trusted side decodes None, bools,
numbers, strings, bytes and the built-in containers of them, and nothing else, so every
comparison the asserts make is the built-in one. An object that is not data comes back
as a ``Remote`` handle, which can be passed back to the completion and equals only
itself. An exception raised by the completion is raised again by its built-in name.
The completion's exit, crash or silence leaves the test failed: the trusted process
never hears a result.

Standard library only: the sandbox's driver (inside/driver.py) runs this text as its
own, under the system's Python, and nothing here imports the service.
"""

import builtins
import os

TYPE_CHECKING = False  # typing costs the sandbox's start-up; the annotations are strings
if TYPE_CHECKING:
    from typing import Any

FRAME_BYTES = 4  # each message: its length, then JSON
SHOWN = 500  # characters of a completion's error that travel


class Remote:
    """Something the completion returned that is not data: it stays there, and this
    handle stands for it. It equals only itself, whatever the object would say."""

    def __init__(self, handle: int, kind: str):
        self.handle, self.kind = handle, kind

    def __repr__(self) -> str:
        return f"<the completion's {self.kind} #{self.handle}>"


class CompletionFailed(RuntimeError):
    """The completion's process did not answer: it left, crashed or broke the protocol."""


# ---------------------------------------------------------------------- the wire


def _write(fd: int, message: object) -> None:
    import json

    data = json.dumps(message).encode("utf-8")
    view = memoryview(len(data).to_bytes(FRAME_BYTES, "little") + data)
    while view:
        view = view[os.write(fd, view) :]


def _read(fd: int, cap: int) -> object:
    import json

    size = int.from_bytes(_exactly(fd, FRAME_BYTES), "little")
    if size > cap:
        raise CompletionFailed(f"the completion sent {size} bytes, over the limit of {cap}")
    return json.loads(_exactly(fd, size))


def _exactly(fd: int, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = os.read(fd, size - len(data))
        if not chunk:
            raise CompletionFailed("the completion's process ended before it answered")
        data += chunk
    return data


# ---------------------------------------------------------------------- values
# JSON's own values stand for themselves (a list for a list); every other kind is an
# object with one tag: {"t": tuple}, {"d": [[key, value], ...]}, {"s": set},
# {"fs": frozenset}, {"b": bytes as hex}, {"c": [real, imag]}, {"h": [handle, kind]},
# {"ty": a built-in type's name}, {"r": [start, stop, step]} (a range), {"it": [items]}
# (an iterator or generator, run out), {"fr": [numerator, denominator]} (a Fraction),
# {"dec": text} (a Decimal).


def _plain(value: object, depth: int = 0) -> object:
    """A trusted value (a test's argument) on the wire; exact types only."""
    if depth > 100:
        raise ValueError("an argument nested over 100 deep")
    kind = type(value)
    if value is None or kind in (bool, int, float, str):
        return value
    if kind is list:
        return [_plain(v, depth + 1) for v in value]  # type: ignore[attr-defined]
    if kind in (tuple, set, frozenset):
        tag = {tuple: "t", set: "s", frozenset: "fs"}[kind]
        return {tag: [_plain(v, depth + 1) for v in value]}  # type: ignore[attr-defined]
    if kind is dict:
        return {"d": [[_plain(k, depth + 1), _plain(v, depth + 1)] for k, v in value.items()]}  # type: ignore[attr-defined]
    if kind is bytes:
        return {"b": value.hex()}  # type: ignore[attr-defined]
    if kind is complex:
        return {"c": [value.real, value.imag]}  # type: ignore[attr-defined]
    if kind is Remote:
        return {"h": [value.handle, value.kind]}  # type: ignore[attr-defined]
    if kind is type and getattr(builtins, str(getattr(value, "__name__", "")), None) is value:
        return {"ty": getattr(value, "__name__", "")}
    if kind is range:
        return {"r": [value.start, value.stop, value.step]}  # type: ignore[attr-defined]
    if (kind.__module__, kind.__name__) == ("fractions", "Fraction"):
        return {"fr": [int(value.numerator), int(value.denominator)]}  # type: ignore[attr-defined]
    if (kind.__module__, kind.__name__) == ("decimal", "Decimal"):
        return {"dec": str(value)}
    raise TypeError(f"a {kind.__name__} cannot be passed to the completion, which runs in a process of its own")


def _data(message: object, depth: int = 0) -> object:
    """What the completion sent, as built-in data only (the trusted side's decoder)."""
    if depth > 100:
        raise CompletionFailed("the completion's value is nested over 100 deep")
    if message is None or type(message) in (bool, int, float, str):
        return message
    if type(message) is list:
        return [_data(v, depth + 1) for v in message]
    if type(message) is dict and len(message) == 1:
        ((tag, body),) = message.items()
        if tag == "h" and type(body) is list and len(body) == 2 and type(body[0]) is int:
            return Remote(body[0], str(body[1])[:100])
        if tag == "c" and type(body) is list and len(body) == 2 and all(type(x) in (int, float) for x in body):
            return complex(body[0], body[1])
        if tag == "b" and type(body) is str:
            return bytes.fromhex(body)
        if tag == "ty" and type(body) is str and isinstance(getattr(builtins, body, None), type):
            return getattr(builtins, body)
        if tag == "r" and type(body) is list and len(body) == 3 and all(type(x) is int for x in body):
            return range(*body)
        if tag == "fr" and type(body) is list and len(body) == 2 and all(type(x) is int for x in body):
            from fractions import Fraction

            return Fraction(body[0], body[1])
        if tag == "dec" and type(body) is str:
            from decimal import Decimal

            return Decimal(body)
        if type(body) is list:
            items: list[Any] = [_data(v, depth + 1) for v in body]
            if tag == "t":
                return tuple(items)
            if tag == "s":
                return set(items)
            if tag == "fs":
                return frozenset(items)
            if tag == "it":
                return iter(items)
            if tag == "d" and all(type(p) is list and len(p) == 2 for p in items):
                return {k: v for k, v in items}
    raise CompletionFailed(f"the completion sent a value this test cannot read: {str(message)[:100]}")


# ---------------------------------------------------------------------- the completion's side


def _as_data(value: object, handles: dict[int, object], depth: int = 0) -> object:
    """Run in the completion's process, on its values: liberal (a subclass of int is sent
    as the int it says it is, a numpy value as its Python one), since whatever this
    sends, the trusted side reads as plain data."""
    if depth > 100:
        raise ValueError("a value nested over 100 deep")
    if value is None:
        return None
    if isinstance(value, bool):
        return bool(value)
    if isinstance(value, str):
        return str(value)
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return float(value)
    if isinstance(value, complex):
        return {"c": [value.real, value.imag]}
    if isinstance(value, (bytes, bytearray)):
        return {"b": bytes(value).hex()}
    if isinstance(value, dict):
        return {"d": [[_as_data(k, handles, depth + 1), _as_data(v, handles, depth + 1)] for k, v in value.items()]}
    if isinstance(value, list):
        return [_as_data(v, handles, depth + 1) for v in value]
    for kind, tag in ((tuple, "t"), (frozenset, "fs"), (set, "s")):
        if isinstance(value, kind):
            return {tag: [_as_data(v, handles, depth + 1) for v in value]}
    if isinstance(value, type) and getattr(builtins, str(getattr(value, "__name__", "")), None) is value:
        return {"ty": getattr(value, "__name__", "")}
    if isinstance(value, range):
        return {"r": [value.start, value.stop, value.step]}
    if type(value).__module__ in ("fractions", "decimal") and type(value).__name__ in ("Fraction", "Decimal"):
        if type(value).__name__ == "Fraction":
            return {"fr": [int(value.numerator), int(value.denominator)]}  # type: ignore[attr-defined]
        return {"dec": str(value)}
    if hasattr(value, "tolist") and callable(value.tolist):  # numpy's arrays and scalars
        return _as_data(value.tolist(), handles, depth + 1)
    if hasattr(value, "__next__") and hasattr(value, "__iter__"):  # a generator, map, zip: run out
        items: list[object] = []
        for item in value:
            if len(items) >= 1_000_000:
                raise ValueError("an iterator of over a million items")
            items.append(_as_data(item, handles, depth + 1))
        return {"it": items}
    handle = len(handles)
    handles[handle] = value
    return {"h": [handle, type(value).__name__]}


def _from_wire(message: object, handles: dict[int, object]) -> object:
    if type(message) is list:
        return [_from_wire(v, handles) for v in message]
    if type(message) is dict:
        ((tag, body),) = message.items()
        if tag == "h":
            return handles[body[0]]
        if tag == "c":
            return complex(*body)
        if tag == "b":
            return bytes.fromhex(body)
        if tag == "ty":
            return getattr(builtins, body)
        if tag == "r":
            return range(*body)
        if tag == "fr":
            from fractions import Fraction

            return Fraction(*body)
        if tag == "dec":
            from decimal import Decimal

            return Decimal(body)
        if tag == "d":
            return {_from_wire(k, handles): _from_wire(v, handles) for k, v in body}
        items = [_from_wire(v, handles) for v in body]
        return {"t": tuple, "s": set, "fs": frozenset}[tag](items)
    return message


def _no_digit_limit() -> None:
    """A big int is a value like any other on the wire (whose frames are capped)."""
    import sys

    if hasattr(sys, "set_int_max_str_digits"):
        sys.set_int_max_str_digits(0)


def completion_process(requests: int, answers: int) -> None:
    """A fresh interpreter's work (``--completion``): the completion's sources come as the
    first message; then ``serve_completion``."""
    _no_digit_limit()
    try:
        sources = _read(requests, 1 << 30)
        # Without the driver's future flags (its annotations are strings; a program's are not).
        parts = [compile(str(text), "<completion>", "exec", dont_inherit=True) for text in sources]  # type: ignore[attr-defined]
    except BaseException as exc:  # noqa: BLE001 - the program's error is its verdict
        _write(answers, {"error": f"{type(exc).__name__}: {exc}"[:SHOWN]})
        return
    serve_completion(parts, requests, answers)


def serve_completion(parts: "list[Any]", requests: int, answers: int) -> None:
    """In the completion's process: run its code, say which names it defined, then
    answer calls until the test's process closes the pipe."""
    import sys

    # As ``python3 prog.py`` runs it: a module of its own as ``__main__``, no arguments.
    main = type(builtins)("__main__")
    main.__dict__["__builtins__"] = builtins
    sys.modules["__main__"] = main
    sys.argv = sys.argv[:1]
    scope: dict[str, object] = main.__dict__
    try:
        for part in parts:
            exec(part, scope)
    except BaseException as exc:  # noqa: BLE001 - the program's error is its verdict
        _write(answers, {"error": f"{type(exc).__name__}: {exc}"[:SHOWN]})
        return
    names = [name for name, value in scope.items() if type(name) is str and callable(value)]
    modules = {name: value.__name__ for name, value in scope.items() if type(value) is type(builtins)}
    _write(answers, {"names": names, "modules": modules})
    handles: dict[int, object] = {}
    while True:
        try:
            call = _read(requests, 1 << 30)
        except CompletionFailed:
            return  # the test is over
        try:
            request: Any = call
            target, args, kwargs = request["call"], request["args"], request["kwargs"]
            function: Any = scope[target] if type(target) is str else handles[target]
            given: Any = _from_wire(args, handles)
            value = function(*given, **{k: _from_wire(v, handles) for k, v in kwargs.items()})
            answer: object = {"value": _as_data(value, handles)}
        except BaseException as exc:  # noqa: BLE001 - raised again on the test's side
            answer = {"raise": [[kind.__name__ for kind in type(exc).__mro__], str(exc)[:SHOWN]]}
        _write(answers, answer)


# ---------------------------------------------------------------------- the test's side


class _Function:
    """The completion's function, as the test's code calls it."""

    def __init__(self, link: "_Link", target: object, name: str):
        self._link, self._target, self.__name__ = link, target, name

    def __call__(self, *args: object, **kwargs: object) -> object:
        return self._link.call(self._target, args, kwargs)

    def __repr__(self) -> str:
        return f"<the completion's {self.__name__}>"


class _Link:
    def __init__(self, requests: int, answers: int, cap: int):
        self.requests, self.answers, self.cap = requests, answers, cap

    def call(self, target: object, args: "tuple[Any, ...]", kwargs: "dict[str, Any]") -> object:
        _write(
            self.requests,
            {"call": target, "args": _plain(list(args)), "kwargs": {k: _plain(v) for k, v in kwargs.items()}},
        )
        answer = _read(self.answers, self.cap)
        if type(answer) is dict and "value" in answer and len(answer) == 1:
            return _data(answer["value"])
        if type(answer) is dict and type(answer.get("raise")) is list and len(answer["raise"]) == 2:
            names, text = answer["raise"]
            raise _again([str(n)[:100] for n in names] if type(names) is list else [], str(text)[:SHOWN])
        raise CompletionFailed("the completion broke the protocol")


# Exceptions that end an iteration or a generator where they are raised: the completion's
# would end a test's map() or all() early, passing what it never checked.
ITERATION_ENDS = ("StopIteration", "StopAsyncIteration", "GeneratorExit")


def _again(names: "list[str]", text: str) -> BaseException:
    """The completion's exception as the test sees it: the first built-in exception in its
    class's MRO (a test may expect a ValueError, and a subclass of it is one), else a
    RuntimeError naming it. Those that end iterations come back as RuntimeError."""
    shown = names[0] if names else "an exception"
    for name in names:
        kind = getattr(builtins, name, None)
        if name in ITERATION_ENDS or not (isinstance(kind, type) and issubclass(kind, Exception)):
            continue
        try:
            return kind(text) if name == shown else kind(f"{shown}: {text}")
        except Exception:  # noqa: BLE001 - one whose constructor wants more
            break
    return RuntimeError(f"{shown}: {text}")


# Modules the test's side imports where the completion imported them (MBPP's asserts use
# the solution's imports): pure ones, none that runs code of its own when imported.
IMPORTABLE = frozenset(
    (
        "array", "bisect", "cmath", "collections", "copy", "datetime", "decimal", "fractions", "functools",
        "heapq", "itertools", "json", "math", "operator", "random", "re", "statistics", "string", "struct",
        "sys", "typing",
    )
)  # fmt: skip


def _import_like(modules: object, scope: "dict[str, object]") -> None:
    """The modules of IMPORTABLE the completion imported, imported here under the same
    names where the test's code has none. The completion names them (a module's
    ``__name__`` is its to set), so nothing outside that list is imported."""
    import importlib

    if type(modules) is not dict:
        return
    for name, module in list(modules.items())[:100]:
        if type(name) is not str or type(module) is not str or module not in IMPORTABLE:
            continue
        if not name.isidentifier() or name in scope or hasattr(builtins, name):
            continue
        scope[name] = importlib.import_module(module)


def start_apart(
    candidate: "list[str]", trusted_before: "list[Any]", after: "list[Any]", entry: "str | None", cap: int
) -> "list[Any]":
    """Start the completion's process (``candidate``: the sources it runs) and return the
    test process's parts: its trusted setup, then a step that binds the completion's
    names (``entry`` always; any other it defined that the setup and the built-ins do
    not), then the asserts.

    The completion runs in a new interpreter (this driver's own source again, with
    ``--completion``), not a fork: a fork would hold a copy of this process's memory, the
    asserts and their expected values among it, for the completion to read."""
    import sys

    _no_digit_limit()
    requests_r, requests_w = os.pipe()
    answers_r, answers_w = os.pipe()
    if os.fork() == 0:
        try:
            os.close(requests_w)
            os.close(answers_r)
            os.set_inheritable(requests_r, True)
            os.set_inheritable(answers_w, True)
            argv = sys.orig_argv
            source = argv[argv.index("-c") + 1]  # the driver runs as ``python ... -c SOURCE``
            flags = [flag for flag in ("-I", "-S") if flag in argv[: argv.index("-c")]]
            os.execv(
                sys.executable,
                [sys.executable, *flags, "-c", source, "--completion", str(requests_r), str(answers_w)],
            )
        finally:
            os._exit(120)
    os.close(requests_r)
    os.close(answers_w)
    _write(requests_w, candidate)
    link = _Link(requests_w, answers_r, cap)

    def bind(scope: dict[str, object]) -> None:
        first = _read(answers_r, cap)
        if type(first) is dict and type(first.get("error")) is str:
            raise CompletionFailed(f"the completion failed to load: {first['error'][:SHOWN]}")
        if type(first) is not dict or type(first.get("names")) is not list:
            raise CompletionFailed("the completion broke the protocol")
        for name in first["names"]:
            if type(name) is not str or not name.isidentifier() or name.startswith("__"):
                continue
            if name == entry or (name not in scope and not hasattr(builtins, name)):
                scope[name] = _Function(link, name, name)
        if entry is not None and entry not in first["names"]:
            raise CompletionFailed(f"the completion defines no {entry!r}")
        _import_like(first.get("modules"), scope)

    return trusted_before + [bind] + after
