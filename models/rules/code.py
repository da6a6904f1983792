"""Code-execution rewards: the completion's code run against the item's tests in a
sandbox (sandbox.py), one verdict per test.

The code is the response's last fenced block for the language (```python, ```py), else
its last untagged block, else the whole response. The reference is one of:
- stdin/stdout tests, verl / APPS / TACO shape: ``{"inputs": [...], "outputs": [...]}``,
  with ``fn_name`` for call-based problems (each input line a JSON argument; a function of
  the module or a method of class ``Solution``); also as a JSON string, or under
  ``input_output`` (TACO); LiveCodeBench's ``public_test_cases`` (``testtype`` stdin or
  functional, with ``metadata.func_name``); open-r1's ``verification_info``
  (``test_cases`` of type stdin_stdout);
- human-eval: ``{"test": ..., "entry_point": ...}`` (``prompt`` is put before code that
  does not define the entry point);
- MBPP: ``{"test_list": [...], "test_setup_code": ...}``, one test per assert.

Verdicts: AC, WA, TLE, MLE, RE, CE, OLE. The score is the fraction of tests passed, or
with ``binary`` 1.0 when all pass (it stops at the first failure). Where the sandbox
itself fails the item is invalid (RuleError), never a 0.

Comparison of outputs (``compare``: ``tokens``, the default, ``exact`` or ``lines``): see
code_compare.py.
"""

from __future__ import annotations

import json
import math
import os
import re
from typing import Any

from rewardserve.models.rules import Limit, RuleError, Scored, rule
from rewardserve.models.rules.code_compare import COMPARE, same_value

LANGUAGES = {"python": ("python", "py", "python3"), "cpp": ("cpp", "c++", "cc", "cxx")}
COMPILERS = {"cpp": "/usr/bin/g++"}  # where the sandbox finds them (its /usr is the system's)
MAX_TESTS = 256
MAX_TEST_CHARS = 8_000_000  # all of an item's test data
# Before the JSON line a harness prints after the program (a call's result, a grader's).
RESULT_MARKER = "\x1erewardserve-result\x1e"
SHOWN = 1 << 20  # of a test's stdout and stderr, where the request asks for them
_FENCE = re.compile(r"```([^\n`]*)\n(.*?)```", re.S)


def extract_code(response: str, language: str = "python") -> str:
    blocks = _FENCE.findall(response)
    tags = LANGUAGES[language]
    tagged = [body for tag, body in blocks if tag.strip().lower() in tags]
    if tagged:
        return str(tagged[-1])
    untagged = [body for tag, body in blocks if not tag.strip()]
    return str(untagged[-1]) if untagged else response


def _as_object(reference: Any) -> dict[str, Any]:
    if isinstance(reference, str):
        try:
            reference = json.loads(reference)
        except ValueError:
            raise RuleError("the code model's reference is a string that is not JSON tests") from None
    if not isinstance(reference, dict):
        raise RuleError(
            "the code model needs a reference object: {inputs, outputs}, {test, entry_point} or {test_list}"
        )
    if "input_output" in reference:
        return _as_object(reference["input_output"])
    if "public_test_cases" in reference:
        return _livecodebench(reference)
    if "test_cases" in reference:
        return _open_r1(reference)
    return reference


def _open_r1(row: dict[str, Any]) -> dict[str, Any]:
    """open-r1's ``verification_info`` (``{language, test_cases: [{input, output, type:
    stdin_stdout}]}``) as inputs and outputs. Compared by this model's rule, not
    open-r1's line ``zip``, which passes an output cut short."""
    cases = row["test_cases"]
    if not isinstance(cases, list) or not all(isinstance(c, dict) and "input" in c and "output" in c for c in cases):
        raise RuleError("test_cases must be a list of {input, output, type}")
    kinds = {c.get("type", "stdin_stdout") for c in cases}
    if kinds != {"stdin_stdout"}:
        raise RuleError(f"test_cases of type {sorted(kinds - {'stdin_stdout'})} are not run here; stdin_stdout is")
    if row.get("language", "python") != "python":
        raise RuleError(f"unsupported language {row.get('language')!r}; supported: {', '.join(LANGUAGES)}")
    return {"inputs": [c["input"] for c in cases], "outputs": [c["output"] for c in cases]}


def _livecodebench(row: dict[str, Any]) -> dict[str, Any]:
    """A LiveCodeBench row's tests (``public_test_cases``, JSON text or a list, each
    ``{input, output, testtype}``) as inputs and outputs; ``functional`` tests call
    ``metadata.func_name`` (JSON text or an object)."""
    cases = row["public_test_cases"]
    metadata = row.get("metadata") or {}
    try:
        cases = json.loads(cases) if isinstance(cases, str) else cases
        metadata = json.loads(metadata) if isinstance(metadata, str) else metadata
    except ValueError:
        raise RuleError("public_test_cases or metadata is not JSON") from None
    if not isinstance(cases, list) or not all(isinstance(c, dict) and "input" in c and "output" in c for c in cases):
        raise RuleError("public_test_cases must be a list of {input, output, testtype}")
    out: dict[str, Any] = {"inputs": [c["input"] for c in cases], "outputs": [c["output"] for c in cases]}
    if any(c.get("testtype") == "functional" for c in cases):
        if not isinstance(metadata, dict) or not metadata.get("func_name"):
            raise RuleError("functional tests need metadata.func_name")
        out["fn_name"] = metadata["func_name"]
    return out


def plan(code: str, reference: Any) -> tuple[str, list[dict[str, Any]], list[Any], str]:
    """(code to run, sandbox tests, what each test's output must be, style): style is
    ``stdio``, ``call`` (expected values: compared here) or ``asserts`` (a test passes by
    running to its end)."""
    ref = _as_object(reference)
    if "inputs" in ref and "outputs" in ref:
        inputs, outputs = ref["inputs"], ref["outputs"]
        if not isinstance(inputs, list) or not isinstance(outputs, list) or len(inputs) != len(outputs):
            raise RuleError("reference inputs and outputs must be lists of the same length")
        fn = ref.get("fn_name")
        if fn:
            if not isinstance(fn, str) or not fn.isidentifier():
                raise RuleError(f"fn_name {str(fn)[:40]!r} is not a Python name")
            tests = [{"after": _call_harness(fn, _lines_of(i))} for i in inputs]
            return code, tests, [_expected_value(o) for o in outputs], "call"
        tests = [{"stdin": i if isinstance(i, str) else "\n".join(map(str, i))} for i in inputs]
        wanted = [o if o is None or isinstance(o, str) else "\n".join(map(str, o)) for o in outputs]
        return code, tests, wanted, "stdio"
    if "test" in ref and "entry_point" in ref:
        entry = str(ref["entry_point"])
        if not entry.isidentifier():
            raise RuleError(f"entry_point {entry[:40]!r} is not a Python name")
        prompt = ref.get("prompt")
        if isinstance(prompt, str) and not re.search(rf"^\s*def\s+{re.escape(entry)}\s*\(", code, re.M):
            code = prompt + code
        return code, [{"after": f"{ref['test']}\ncheck({entry})\n"}], [None], "asserts"
    if "test_list" in ref:
        asserts = ref["test_list"]
        if not isinstance(asserts, list) or not all(isinstance(a, str) for a in asserts):
            raise RuleError("test_list must be a list of assert statements")
        setup = ref.get("test_setup_code") or ""
        return code, [{"before": setup, "after": a} for a in asserts], [None] * len(asserts), "asserts"
    raise RuleError("the code model's reference has no tests: {inputs, outputs}, {test, entry_point} or {test_list}")


def _lines_of(value: Any) -> list[Any]:
    if isinstance(value, str):
        try:
            return [json.loads(line) for line in value.split("\n") if line.strip()]
        except ValueError:
            raise RuleError("a call-based input line is not JSON") from None
    return list(value) if isinstance(value, list) else [value]


def _expected_value(value: Any) -> Any:
    if isinstance(value, str):
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value


def _call_harness(fn: str, args: list[Any]) -> str:
    """Run after the program in its globals: the function (or Solution's method) on the
    arguments, its result as one JSON line after a blank separator."""
    return (
        "import json as _rs_json\n"
        f"_rs_fn = globals().get({fn!r}) or getattr(globals()['Solution'](), {fn!r})\n"
        f"_rs_out = _rs_fn(*_rs_json.loads({json.dumps(json.dumps(args))}))\n"
        f"print()\nprint({RESULT_MARKER!r} + _rs_json.dumps(_rs_out, default=repr))\n"
    )


def _call_result(stdout: str) -> Any:
    at = stdout.rfind(RESULT_MARKER)
    if at < 0:
        raise ValueError("no result")
    return json.loads(stdout[at + len(RESULT_MARKER) :].strip())


def verdict(result: dict[str, Any], want: Any, style: str, compare: str) -> str:
    if result.get("verdict"):
        return str(result["verdict"])
    if result.get("exit_code") == 137 and "MemoryError" in result.get("stderr", ""):
        return "MLE"
    if result.get("exit_code") != 0 or result.get("signal"):
        return "RE"
    if style == "asserts" or want is None:  # no expected output: a clean exit passes (verl's rule)
        return "AC"
    if style == "call":
        try:
            return "AC" if same_value(_call_result(result.get("stdout", "")), want) else "WA"
        except ValueError:
            return "RE"
    return "AC" if COMPARE[compare](result.get("stdout", ""), want) else "WA"


class CodeScore(Scored):
    """The score, why, and each test's verdict with its time and memory."""

    tests: list[dict[str, Any]]

    def __new__(cls, value: float, reason: str, tests: list[dict[str, Any]]) -> CodeScore:
        out = float.__new__(cls, value)
        out.reason = reason
        out.tests = tests
        return out

    def __reduce__(self) -> tuple[Any, ...]:  # back from a worker whole
        return (CodeScore, (float(self), self.reason, self.tests))


def _limits(response: str, reference: Any, args: dict[str, Any]) -> Limit | None:
    size = len(reference) if isinstance(reference, str) else len(json.dumps(reference, default=str))
    if size > MAX_TEST_CHARS:
        return Limit("reference", f"{size} characters of tests, over the code model's limit of {MAX_TEST_CHARS}")
    try:
        count = len(plan("", reference)[1])
    except RuleError:  # judged in the worker, where it makes only this item invalid
        return None
    if count > MAX_TESTS:
        return Limit("reference", f"{count} tests, over the code model's limit of {MAX_TESTS}", "invalid_request")
    return None


def _sandbox() -> str:
    from rewardserve.models.rules import sandbox

    return sandbox.check()


@rule("code_tests", limits=_limits, pool="code", startup=_sandbox, request_options="code")
def code_tests(
    response: str,
    reference: Any,
    *,
    language: str = "python",
    compare: str = "tokens",
    binary: bool = False,
    timeout_s: float = 6.0,
    memory_mb: int = 1024,
    outputs: bool = False,
    extract: bool = True,
    max_timeout_s: float = 60.0,
    max_memory_mb: int = 4096,
    **_: Any,
) -> float:
    """The share of the reference's tests the response's code passes (see the module).
    ``max_timeout_s`` and ``max_memory_mb`` are the model's caps on what a request asks
    (service settings ``code_max_timeout_s``, ``code_max_memory_mb`` for the built-in one)."""
    from rewardserve.models.rules import sandbox

    if language not in LANGUAGES:
        raise RuleError(f"unsupported language {language!r}; supported: {', '.join(LANGUAGES)}")
    if language in COMPILERS and not os.path.exists(COMPILERS[language]):
        raise RuleError(f"unsupported language {language!r} here: no {COMPILERS[language]}")
    if compare not in COMPARE:
        raise RuleError(f"unknown compare {compare!r}; known: {', '.join(COMPARE)}")
    code, tests, wanted, style = plan(extract_code(response, language) if extract else response, reference)
    if language != "python" and style != "stdio":
        raise RuleError(f"{language} runs stdin/stdout tests ({{inputs, outputs}}); these are {style} tests")
    if not tests:
        raise RuleError("the reference has no tests")
    if len(tests) > MAX_TESTS:
        raise RuleError(f"{len(tests)} tests, over the code model's limit of {MAX_TESTS}")
    limits = sandbox.Limits(
        timeout_s=min(float(timeout_s), float(max_timeout_s)), memory_mb=min(int(memory_mb), int(max_memory_mb))
    )
    verdicts: list[str] = []

    def judged(result: dict[str, Any]) -> bool:
        verdicts.append(verdict(result, wanted[len(verdicts)], style, compare))
        return binary and verdicts[-1] != "AC"

    try:
        outcome = sandbox.run(code, tests, limits, stop=judged, asserts=style == "asserts", language=language)
    except sandbox.SandboxUnavailable as exc:
        raise RuleError(f"the sandbox failed: {exc}") from None
    except ValueError as exc:
        raise RuleError(f"the reference's test code does not compile: {exc}") from None
    if outcome.compile_error is not None:
        return CodeScore(0.0, f"CE: {outcome.compile_error}", [{"verdict": "CE", "detail": outcome.compile_error}])
    for result in outcome.results[len(verdicts) :]:  # tests the program's runner never reported
        verdicts.append(str(result["verdict"]))
    details: list[dict[str, Any]] = [
        {
            "verdict": v,
            "time_s": r.get("time_s"),
            "memory_kb": r.get("memory_kb"),
            "exit_code": r.get("exit_code"),
            "signal": r.get("signal"),
            **({"stdout": r.get("stdout", "")[:SHOWN], "stderr": r.get("stderr", "")[:SHOWN]} if outputs else {}),
        }
        for v, r in zip(verdicts, outcome.results)
    ]
    passed = sum(v == "AC" for v in verdicts)
    score = float(passed == len(tests)) if binary else passed / len(tests)
    failed = next((f"test {i}: {v}" for i, v in enumerate(verdicts) if v != "AC"), "")
    return CodeScore(score, f"{passed}/{len(tests)} passed" + (f"; first failure {failed}" if failed else ""), details)


GRADER = (
    "import json as _rs_json, sys as _rs_sys\n"
    "_rs_in = _rs_json.loads(_rs_sys.stdin.read())\n"
    "_rs_out = float(grade(_rs_in['sample'], _rs_in['item']))\n"
    f"print({RESULT_MARKER!r} + _rs_json.dumps(_rs_out))\n"
)


@rule("python_grader", pool="code", startup=_sandbox)
def python_grader(
    response: str, reference: Any, *, source: str = "", timeout_s: float = 2.0, memory_mb: int = 512, **_: Any
) -> float:
    """A rubric criterion's own grader (``python`` in the criterion): its source defines
    ``grade(sample, item) -> float``, run in the code model's sandbox with the same limits
    as completions; any failure of it marks its items' criterion invalid."""
    from rewardserve.models.rules import sandbox

    if not source.strip():
        raise RuleError("the python criterion has no source")
    payload = json.dumps({"sample": {"output_text": response}, "item": {"reference": reference}}, default=str)
    limits = sandbox.Limits(timeout_s=min(float(timeout_s), 30.0), memory_mb=min(int(memory_mb), 4096))
    try:
        outcome = sandbox.run(source, [{"stdin": payload, "after": GRADER}], limits)
    except sandbox.SandboxUnavailable as exc:
        raise RuleError(f"the sandbox failed: {exc}") from None
    if outcome.compile_error is not None:
        raise RuleError(f"the grader does not compile: {outcome.compile_error}")
    (result,) = outcome.results
    if result.get("verdict") or result.get("exit_code") != 0 or result.get("signal"):
        why = result.get("verdict") or (result.get("stderr") or "").strip()[-300:] or f"exit {result.get('exit_code')}"
        raise RuleError(f"the grader failed: {why}")
    try:
        value = float(_call_result(result.get("stdout", "")))
    except (ValueError, TypeError):
        raise RuleError("the grader gave no number") from None
    if not math.isfinite(value):
        raise RuleError(f"the grader gave {value}")
    return value
