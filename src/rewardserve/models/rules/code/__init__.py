"""Code-execution rewards: the completion's code run against the item's tests in a
sandbox (sandbox.py), one verdict per test.

The code and the tests: see code/formats.py.

Verdicts: AC, WA, TLE, MLE, RE, CE, OLE. The score is the fraction of tests passed, or
with ``binary`` 1.0 when all pass (it stops at the first failure). Where the sandbox
itself fails the item is invalid (RuleError), never a 0.

Comparison of outputs (``compare``: ``tokens``, the default, ``exact``, ``lines`` or
``sandbox_fusion``): see code/compare.py.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import math
import os
from typing import Any

from rewardserve.models.rules import Limit, RuleError, Scored, rule
from rewardserve.models.rules.code.compare import COMPARE, HARNESS_EQUALITY, HARNESS_STDOUT, same_value
from rewardserve.models.rules.code.formats import (
    LANGUAGES,
    RESULT_MARKER,
    HarnessText,
    HarnessValue,
    call_result,
    checker_source,
    extract_code,
    files_of,
    plan,
    tests_of,
    typed_result,
)
from rewardserve.models.rules.code.sandbox.builds import COMPILER_FILES

COMPILERS = COMPILER_FILES  # where the sandbox finds them (its /usr is the system's)
MAX_TESTS = 256
MAX_TEST_CHARS = 8_000_000  # all of an item's test data
SHOWN = 1 << 20  # of a test's stdout and stderr, where the request asks for them
# An item's stdout and stderr shown in its answer, all its tests together: each test's
# share of it is the same, so that one answer stays this size whatever the program prints.
ANSWER_BYTES = 16 << 20
DETAIL_CHARS = 300  # of a failed run's last line of stderr
# A completion's tests get this share of the rule call's time left (less a margin to send
# its answer in: ANSWER_MARGIN of it, ANSWER_MARGIN_S at least) where a checker judges
# them after; the checker, the rest.
TESTS_SHARE_WITH_CHECKER = 0.6
ANSWER_MARGIN, ANSWER_MARGIN_S = 0.05, 1.0


def verdict(result: dict[str, Any], want: Any, style: str, compare: str) -> str:
    if result.get("verdict"):
        return str(result["verdict"])
    if result.get("exit_code") == 137 and "MemoryError" in result.get("stderr", ""):
        return "MLE"
    if result.get("exit_code") != 0 or result.get("signal"):
        return "RE"
    if style == "asserts" or (
        want is None and style == "stdio"
    ):  # no expected output: a clean exit passes (verl's rule)
        return "AC"
    if style == "call":
        try:
            got = call_result(result.get("stdout", ""))
        except ValueError:
            return "RE"
        if isinstance(want, HarnessValue):  # its harness's equality, on the result with its types
            try:
                typed = typed_result(got)
            except ValueError:
                return "WA"
            return "AC" if HARNESS_EQUALITY[want.harness](typed, want.value) else "WA"
        # APPS and TACO wrap a call's expected value in a one-item list, and their judge
        # (verl 0.9.1's prime_code/testing_util.py, run_test) takes the value or its list.
        wrapped = isinstance(want, list) and len(want) == 1 and same_value(got, want[0])
        return "AC" if same_value(got, want) or wrapped else "WA"
    same = HARNESS_STDOUT[want.harness] if isinstance(want, HarnessText) else COMPARE[compare]  # a harness's own rule
    return "AC" if same(result.get("stdout", ""), want) else "WA"


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
        count = len(plan("", _unpacked_only(reference))[1])
    except RuleError:  # judged in the worker, where it makes only this item invalid
        return None
    if count > MAX_TESTS:
        return Limit("reference", f"{count} tests, over the code model's limit of {MAX_TESTS}", "invalid_request")
    return None


def _unpacked_only(reference: Any) -> Any:
    """The reference without LiveCodeBench's compressed private tests: this check runs in
    the serving process, where a small field that inflates to tens of MB (and a pickle
    to read) would cost every request; the worker reads them under its memory limit and
    holds their count to MAX_TESTS there (the item invalid, not the request)."""
    if isinstance(reference, str) and "private_test_cases" in reference:
        try:
            reference = json.loads(reference)
        except ValueError:
            return reference
    if isinstance(reference, dict) and isinstance(reference.get("private_test_cases"), str):
        packed = reference["private_test_cases"].lstrip()
        if not packed.startswith("["):
            return {k: v for k, v in reference.items() if k != "private_test_cases"}
    return reference


def _sandbox(args: dict[str, Any]) -> str:
    from rewardserve.models.rules.code import sandbox

    return sandbox.check(unsafe=bool(args.get("unsafe_exec")))


# The served code model's own (its args; the settings for the built-in one): no request sets them.
OPERATOR_ARGS = ("max_timeout_s", "max_memory_mb", "unsafe_exec")


@rule(
    "code_tests",
    limits=_limits,
    pool="code",
    startup=_sandbox,
    request_options="code",
    operator_args=OPERATOR_ARGS,
    served_by="code_tests",
)
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
    unsafe_exec: bool = False,
    harness: str | None = None,
    **_: Any,
) -> float:
    """The share of the reference's tests the response's code passes (see the module).
    ``max_timeout_s`` and ``max_memory_mb`` are the model's caps on what a request asks
    (service settings ``code_max_timeout_s``, ``code_max_memory_mb`` for the built-in one).
    ``unsafe_exec``: where the sandbox cannot start, run without it (the operator's
    --unsafe-code-exec; a request cannot set it)."""
    from rewardserve.models.rules.code import sandbox

    if language not in LANGUAGES:
        raise RuleError(f"unsupported language {language!r}; supported: {', '.join(LANGUAGES)}")
    if language in COMPILERS and not os.path.exists(COMPILERS[language]):
        raise RuleError(f"unsupported language {language!r} here: no {COMPILERS[language]}")
    if compare not in COMPARE:
        raise RuleError(f"unknown compare {compare!r}; known: {', '.join(COMPARE)}")
    reference = tests_of(reference)  # parsed once for the readers below
    code, tests, wanted, style = plan(
        extract_code(response, language) if extract else response, reference, harness, language
    )
    if language != "python" and style != "stdio":
        raise RuleError(f"{language} runs stdin/stdout tests ({{inputs, outputs}}); these are {style} tests")
    if not tests:
        raise RuleError("the reference has no tests")
    if len(tests) > MAX_TESTS:
        raise RuleError(f"{len(tests)} tests, over the code model's limit of {MAX_TESTS}")
    limits = sandbox.Limits(
        timeout_s=min(float(timeout_s), float(max_timeout_s)), memory_mb=min(int(memory_mb), int(max_memory_mb))
    )
    checker = checker_source(reference)
    files, fetch = files_of(reference)
    if checker is not None and style != "stdio":
        raise RuleError(f"a checker judges stdin/stdout tests ({{inputs, outputs}}); these are {style} tests")
    verdicts: list[str] = []
    shown = min(SHOWN, ANSWER_BYTES // (2 * len(tests))) if outputs else 0

    def judged(result: dict[str, Any]) -> bool:
        # With a checker, a clean run is AC until the checker has read its output.
        want = wanted[len(verdicts)] if checker is None else None
        try:
            verdicts.append(verdict(result, want, style, compare))
        except Exception:  # noqa: BLE001 - an output that breaks the comparison (JSON nested past the stack, 10**400 for a float) is no answer
            verdicts.append("WA")
        # Judged as it arrives: what the answer shows of it is kept, the rest goes now
        # (an AC run's stdout stays whole for the checker, within the output total).
        _shrink(result, verdicts[-1], shown, keep_stdout=checker is not None and verdicts[-1] == "AC")
        return binary and verdicts[-1] != "AC"

    try:
        outcome = sandbox.run(
            code,
            tests,
            limits,
            stop=judged,
            asserts=style == "asserts",
            language=language,
            files=files,
            fetch_files=fetch,
            unsafe=unsafe_exec,
            budget_s=_budget(TESTS_SHARE_WITH_CHECKER if checker is not None else 1.0),
        )
    except sandbox.SandboxUnavailable as exc:
        raise RuleError(f"the sandbox failed: {exc}") from None
    except ValueError as exc:
        raise RuleError(f"the reference's tests cannot be set up: {exc}") from None
    if outcome.compile_error is not None:
        return CodeScore(0.0, f"CE: {outcome.compile_error}", [{"verdict": "CE", "detail": outcome.compile_error}])
    for result in outcome.results[len(verdicts) :]:  # tests the program's runner never reported
        verdicts.append(str(result["verdict"]))
    if checker is not None:
        verdicts = checked(checker, tests, wanted, outcome.results, verdicts, limits, binary, unsafe_exec)
    details = [_detail(v, r, shown, bool(fetch)) for v, r in zip(verdicts, outcome.results)]
    passed = sum(v == "AC" for v in verdicts)
    score = float(passed == len(tests)) if binary else passed / len(tests)
    failed = next((f"test {i}: {v}" for i, v in enumerate(verdicts) if v != "AC"), "")
    return CodeScore(score, f"{passed}/{len(tests)} passed" + (f"; first failure {failed}" if failed else ""), details)


def _budget(share: float = 1.0) -> float | None:
    """Seconds this item's runs may take from now: ``share`` of what is left of the rule
    call's time limit, less a margin to answer in (past the limit the pool kills the
    call and the item has no answer); None outside a pool's call."""
    from rewardserve.models.rules.worker import call_time_left

    left = call_time_left()
    return None if left is None else max(0.0, left - max(ANSWER_MARGIN_S, ANSWER_MARGIN * left)) * share


def _shrink(result: dict[str, Any], judged: str, shown: int, keep_stdout: bool = False) -> None:
    """A judged run's record cut to what its answer shows: an RE's last line of stderr
    as its detail, and the first ``shown`` bytes of stdout and stderr (none where the
    request did not ask for them), ``truncated`` where more was cut."""
    if judged == "RE" and not result.get("detail"):
        result["detail"] = _last_line(result.get("stderr") or "")
    for stream in ("stderr",) if keep_stdout else ("stdout", "stderr"):
        text, cut = json_prefix(result.pop(stream, None) or "", shown)
        if shown:
            result[stream] = text
        result["truncated"] = bool(result.get("truncated") or (cut and shown))


def _detail(judged: str, result: dict[str, Any], shown: int, fetched: bool) -> dict[str, Any]:
    """One test as the answer shows it."""
    detail: dict[str, Any] = {
        "verdict": judged,
        "time_s": result.get("time_s"),
        "memory_kb": result.get("memory_kb"),
        "exit_code": result.get("exit_code"),
        "signal": result.get("signal"),
        "detail": result.get("detail"),
    }
    if shown:  # an AC run's stdout was kept whole for the checker
        stdout, stderr, cut = shown_streams(result.get("stdout") or "", result.get("stderr") or "", shown)
        detail.update(stdout=stdout, stderr=stderr, truncated=bool(result.get("truncated") or cut))
    if fetched:
        detail["files"] = {p: base64.b64encode(d).decode() for p, d in result.get("files", {}).items()}
    return detail


def shown_streams(stdout: str, stderr: str, limit: int) -> tuple[str, str, bool]:
    """A test's stdout and stderr, each cut to ``limit`` bytes of JSON text, and whether
    either was cut."""
    stdout, cut_out = json_prefix(stdout, limit)
    stderr, cut_err = json_prefix(stderr, limit)
    return stdout, stderr, cut_out or cut_err


def json_prefix(text: str, limit: int) -> tuple[str, bool]:
    """The start of ``text`` whose JSON string takes at most ``limit`` bytes (a control
    character is six, ``\\u0001``), and whether anything was cut."""
    if len(text) <= limit // 6:
        return text, False
    cut = text[:limit]
    size = json_bytes(cut)
    while size > limit:
        cut = cut[: len(cut) * limit // size]
        size = json_bytes(cut)
    return cut, len(cut) < len(text)


def json_bytes(text: str) -> int:
    return len(json.dumps(text, ensure_ascii=False).encode("utf-8", "surrogatepass")) - 2


def _last_line(text: str) -> str | None:
    """The last non-empty line of a run's stderr (a Python exception's own line), bounded."""
    for line in reversed(text[-(1 << 16) :].splitlines()):
        if line.strip():
            return line.strip()[:DETAIL_CHARS]
    return None


# Before a checker runs: testlib's arguments (input, the program's output, the expected
# answer) as files in its working directory, and the input on its stdin. The output comes
# in base64: whatever it holds, a third over its size (in JSON a control character is six).
# A setup that fails exits with its own status (never 1, a checker's "reject").
CHECKER_SETUP = (
    "import base64 as _rs_base64, json as _rs_json, os as _rs_os, sys as _rs_sys\n"
    "try:\n"
    "    _rs_case = _rs_json.loads(_rs_sys.stdin.read())\n"
    "    _rs_case['output'] = _rs_base64.b64decode(_rs_case['output']).decode('utf-8')\n"
    "    for _rs_name in ('input', 'output', 'answer'):\n"
    "        with open(_rs_name + '.txt', 'w', encoding='utf-8') as _rs_file:\n"
    "            _rs_file.write(_rs_case[_rs_name])\n"
    "    _rs_sys.stdin = open('input.txt', encoding='utf-8')\n"
    "except BaseException:\n"
    "    _rs_os._exit(125)\n"
    "_rs_sys.argv = ['checker', 'input.txt', 'output.txt', 'answer.txt']\n"
    "del _rs_case, _rs_name, _rs_file, _rs_base64\n"
)
CHECKER_ACCEPTS, CHECKER_REJECTS = 0, (1, 2)  # testlib's exit codes: ok; wrong answer, presentation error
CHECKER_MEMORY_MB, CHECKER_TIMEOUT_S, CHECKER_OUTSIZED = 2048, 10.0, 1 << 16
CHECKER_BATCH_CHARS = 16 << 20  # of the outputs one run of the checker judges (one output may pass it)


def checked(
    checker: str,
    tests: list[dict[str, Any]],
    wanted: list[Any],
    results: list[dict[str, Any]],
    verdicts: list[str],
    limits: Any,
    binary: bool,
    unsafe: bool = False,
) -> list[str]:
    """The verdicts with each clean run's AC or WA as the reference's checker says: it
    runs in the sandbox, as the completion did, once per such test, under limits of its
    own (at least CHECKER_MEMORY_MB and CHECKER_TIMEOUT_S: the completion's could be
    too tight for reading its largest output). A checker that fails (another exit code, a
    crash, its time) on an output is asked about the expected answer in its place: if it
    accepts that, the output was what broke it and the test is a WA; a completion must
    not turn its wrong answer into no answer (dropped, not penalised) by printing what
    the checker cannot parse. A checker that fails on its own answer as well makes the
    item invalid. An outsized output (over CHECKER_OUTSIZED bytes and 4 times its
    answer's) that breaks the checker is a WA without asking. A test the item's time
    budget left the checker no time for is a TLE."""
    judged = [i for i, v in enumerate(verdicts) if v == "AC"]
    if not judged:
        return verdicts
    out = list(verdicts)
    seen: list[int] = []
    broke: dict[int, str] = {}  # a test whose output the checker failed on: why

    def read(result: dict[str, Any]) -> bool:
        at = judged[len(seen)]
        seen.append(at)
        out[at] = "WA"
        if result.get("budget"):
            out[at] = "TLE"
        elif _checker_failed(result):
            output = len(results[at].get("stdout", ""))
            if output <= CHECKER_OUTSIZED or output <= 4 * len(wanted[at] or ""):
                broke[at] = _why_failed(result)
        elif result.get("exit_code") == CHECKER_ACCEPTS:
            out[at] = "AC"
        return binary and out[at] != "AC"

    own = dataclasses.replace(
        limits, memory_mb=max(limits.memory_mb, CHECKER_MEMORY_MB), timeout_s=max(limits.timeout_s, CHECKER_TIMEOUT_S)
    )
    offered = 0
    for group in _checker_groups(judged, results):
        # The outputs a group's cases carry are encoded (JSON, then the sandbox's spec)
        # together: a group at a time keeps that to CHECKER_BATCH_CHARS of output.
        offered += len(group)
        cases = [_checker_case(tests[i], results[i].get("stdout", ""), wanted[i]) for i in group]
        _run_checker(checker, cases, own, read, unsafe, _budget())
        if len(seen) < offered:  # ``read`` stopped it: a binary score's first WA
            break
    if broke:
        # The checker on the expected answer, in the failed output's place.
        asked = list(broke)
        sound: list[bool] = []

        def answered(result: dict[str, Any]) -> bool:
            if result.get("budget"):  # no time left to tell: the test was not judged in time
                out[asked[len(sound)]] = "TLE"
                sound.append(True)
                return False
            sound.append(not _checker_failed(result) and result.get("exit_code") == CHECKER_ACCEPTS)
            return not sound[-1]

        answers = [_checker_case(tests[i], wanted[i] or "", wanted[i]) for i in asked]
        _run_checker(checker, answers, own, answered, unsafe, _budget())
        if not all(sound):
            at = asked[sound.index(False)]
            raise RuleError(f"the checker failed on test {at}: {broke[at]}; and on its own answer")
    if len(seen) < len(judged):  # a binary score's first WA: what follows was never checked
        return out[: seen[-1] + 1]
    return out


def _checker_groups(judged: list[int], results: list[dict[str, Any]]) -> list[list[int]]:
    """The tests the checker judges, in order, in groups of at most CHECKER_BATCH_CHARS of
    output (a group of one where one output is larger)."""
    groups: list[list[int]] = [[]]
    size = 0
    for at in judged:
        output = len(results[at].get("stdout") or "")
        if groups[-1] and size + output > CHECKER_BATCH_CHARS:
            groups.append([])
            size = 0
        groups[-1].append(at)
        size += output
    return groups


def _checker_case(test: dict[str, Any], output: str, answer: Any) -> dict[str, Any]:
    """One run of the checker: its input, the output it judges, the expected answer."""
    return {
        "stdin": json.dumps(
            {
                "input": test.get("stdin", ""),
                "output": base64.b64encode(output.encode("utf-8")).decode("ascii"),
                "answer": answer or "",
            }
        ),
        "before": CHECKER_SETUP,
    }


def _checker_failed(result: dict[str, Any]) -> bool:
    """A checker's run that neither accepted nor rejected: a crash, its time, its setup."""
    exit_code = result.get("exit_code")
    return bool(result.get("verdict") or result.get("signal")) or exit_code not in (CHECKER_ACCEPTS, *CHECKER_REJECTS)


def _run_checker(
    checker: str, cases: list[dict[str, Any]], limits: Any, read: Any, unsafe: bool, budget_s: float | None = None
) -> None:
    """The checker over ``cases`` in the sandbox, each result handed to ``read`` (which
    says whether to stop), the tests its runner never reported (it was killed) or its
    time budget (``budget_s``) left no time for included."""
    from rewardserve.models.rules.code import sandbox

    seen = 0

    def counted(result: dict[str, Any]) -> bool:
        nonlocal seen
        seen += 1
        return bool(read(result))

    try:
        outcome = sandbox.run(checker, cases, limits, stop=counted, unsafe=unsafe, budget_s=budget_s)
    except sandbox.SandboxUnavailable as exc:
        raise RuleError(f"the sandbox failed: {exc}") from None
    except ValueError as exc:
        raise RuleError(f"the checker's setup does not compile: {exc}") from None
    if outcome.compile_error is not None:
        raise RuleError(f"the checker does not compile: {outcome.compile_error}")
    for result in outcome.results[seen:]:
        if read(result):
            break


def _why_failed(result: dict[str, Any]) -> str:
    """What became of a run of the reference's own code (a checker, a grader) that did
    not end well: its verdict, else the end of its stderr, else its exit."""
    return result.get("verdict") or (result.get("stderr") or "").strip()[-300:] or f"exit {result.get('exit_code')}"


GRADER = (
    "import json as _rs_json, sys as _rs_sys\n"
    "_rs_in = _rs_json.loads(_rs_sys.stdin.read())\n"
    "_rs_out = float(grade(_rs_in['sample'], _rs_in['item']))\n"
    f"print({RESULT_MARKER!r} + _rs_json.dumps(_rs_out))\n"
)


@rule("python_grader", pool="code", startup=_sandbox, operator_args=OPERATOR_ARGS, served_by="code_tests")
def python_grader(
    response: str,
    reference: Any,
    *,
    source: str = "",
    timeout_s: float = 2.0,
    memory_mb: int = 512,
    max_timeout_s: float = 30.0,
    max_memory_mb: int = 4096,
    unsafe_exec: bool = False,
    **_: Any,
) -> float:
    """A rubric criterion's own grader (``python`` in the criterion): its source defines
    ``grade(sample, item) -> float``, run in the code model's sandbox with the same limits
    as completions; any failure of it marks its items' criterion invalid. ``max_timeout_s``,
    ``max_memory_mb`` and ``unsafe_exec`` are the served code model's, as for code_tests."""
    from rewardserve.models.rules.code import sandbox

    if not source.strip():
        raise RuleError("the python criterion has no source")
    payload = json.dumps({"sample": {"output_text": response}, "item": {"reference": reference}}, default=str)
    limits = sandbox.Limits(
        timeout_s=min(float(timeout_s), float(max_timeout_s)), memory_mb=min(int(memory_mb), int(max_memory_mb))
    )
    try:
        outcome = sandbox.run(source, [{"stdin": payload, "after": GRADER}], limits, unsafe=unsafe_exec)
    except sandbox.SandboxUnavailable as exc:
        raise RuleError(f"the sandbox failed: {exc}") from None
    if outcome.compile_error is not None:
        raise RuleError(f"the grader does not compile: {outcome.compile_error}")
    (result,) = outcome.results
    if result.get("verdict") or result.get("exit_code") != 0 or result.get("signal"):
        raise RuleError(f"the grader failed: {_why_failed(result)}")
    try:
        value = float(call_result(result.get("stdout", "")))
    except (ValueError, TypeError):
        raise RuleError("the grader gave no number") from None
    if not math.isfinite(value):
        raise RuleError(f"the grader gave {value}")
    return value
