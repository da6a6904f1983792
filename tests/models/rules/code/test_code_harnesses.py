"""Each format graded in its dataset's environment (models/rules/code/formats.py, the
harnesses), held to the dataset's own grader run on the same rows:

- LiveCodeBench rows against LiveCodeBench's ``check_correctness``, through its
  ``evaluate_generations_by_problem`` (which makes a grader's crash a failure;
  lcb_runner/evaluation/compute_code_generation_metrics.py at commit 28fef95, stored in
  tests/models/rules/code/data/livecodebench with its licence), each row's sample built by its
  own ``CodeGenerationProblem`` (which decodes the private tests);
- APPS / TACO rows against verl 0.9.1's ``prime_code.compute_score``
  (verl/utils/reward_score/prime_code/, installed ``--no-deps``).

Both graders run the code in their own process after a reliability guard, not in a
sandbox: they run here in a subprocess, on this file's rows only. Where LiveCodeBench's
harness is wrong about I/O (its mocked stdin and captured stdout) or its guard removes
``quit``, the code model keeps plain Python's verdict, which the test takes from
``python3 prog.py`` itself.
"""

from __future__ import annotations

import base64
import importlib.util
import json
import os
import pickle
import subprocess
import sys
import zlib
from pathlib import Path

import pytest

from rewardserve.models.rules import RuleError
from rewardserve.models.rules.code import code_tests
from rewardserve.models.rules.code.compare import same_lines

LCB_DATA = Path(__file__).parent / "data" / "livecodebench"
LCB_FILES = (
    "lcb_runner/evaluation/testing_util.py",
    "lcb_runner/evaluation/compute_code_generation_metrics.py",
    "lcb_runner/evaluation/pass_k_utils.py",
    "lcb_runner/benchmarks/code_generation.py",
)
GRADER_TIMEOUT_S = 240


def stdin(given: str, expected: str) -> dict[str, str]:
    return {"input": given, "output": expected, "testtype": "stdin"}


def functional(given: str, expected: str) -> dict[str, str]:
    return {"input": given, "output": expected, "testtype": "functional"}


def packed(cases: list[dict[str, str]]) -> str:
    """Private tests as LiveCodeBench publishes them: base64 of zlib of a pickled JSON text."""
    return base64.b64encode(zlib.compress(pickle.dumps(json.dumps(cases)))).decode()


def lcb_row(public: list[dict[str, str]], private: list[dict[str, str]] = (), func_name: str | None = None):  # type: ignore[assignment]
    """A row in livecodebench/code_generation_lite's shape, every field its loader reads."""
    return {
        "question_title": "row",
        "question_content": "",
        "platform": "leetcode" if func_name else "atcoder",
        "question_id": "0",
        "contest_id": "0",
        "contest_date": "2024-01-01T00:00:00",
        "starter_code": "",
        "difficulty": "easy",
        "public_test_cases": json.dumps(public),
        "private_test_cases": packed(list(private)),
        "metadata": json.dumps({"func_name": func_name} if func_name else {}),
    }


ADD = [stdin("1 2\n", "3\n"), stdin("10 -3\n", "7\n")]
GCD = [stdin("12 18\n", "6\n"), stdin("7 5\n", "1\n")]
LINES = "3\n1\n2\n3\n"

# name: (row, code). The rows' verdicts are LiveCodeBench's, computed by its grader below.
LCB_ROWS = {
    "stdin_ac": (lcb_row(ADD), "a, b = map(int, input().split())\nprint(a + b)\n"),
    "stdin_wa": (lcb_row(ADD), "a, b = map(int, input().split())\nprint(a - b)\n"),
    "stdin_exit_at_the_end": (lcb_row(ADD), "a, b = map(int, input().split())\nprint(a + b)\nexit()\n"),
    "stdin_exit_early": (
        lcb_row([stdin("0\n", "NO\n"), stdin("2\n", "YES\n")]),
        "n = int(input())\nif n == 0:\n    print('NO')\n    exit()\nprint('YES')\n",
    ),
    "stdin_nonzero_exit_after_the_answer": (
        lcb_row(ADD),
        "import sys\na, b = map(int, input().split())\nprint(a + b)\nsys.exit(1)\n",
    ),
    "stdin_exit_with_a_message": (lcb_row(ADD), "a, b = map(int, input().split())\nprint(a + b)\nexit('done')\n"),
    "functional_exit": (
        lcb_row([functional("2", "4")], func_name="square"),
        "class Solution:\n    def square(self, n):\n        exit()\n",
    ),
    "stdin_future_import": (
        lcb_row(ADD),
        "from __future__ import annotations\na, b = map(int, input().split())\nprint(a + b)\n",
    ),
    "functional_future_import": (
        lcb_row([functional("2", "4")], func_name="square"),
        "from __future__ import annotations\n"
        "class Solution:\n    def square(self, n: Num) -> Num:\n        return n * n\n",
    ),
    "stdin_main_guard": (
        lcb_row(ADD),
        "def main():\n    a, b = map(int, input().split())\n    print(a + b)\n\n"
        "if __name__ == '__main__':\n    main()\n",
    ),
    "stdin_undefined_annotation": (
        lcb_row(ADD),
        "def add(a: Num, b: Num) -> Num:\n    return a + b\nprint(add(*map(int, input().split())))\n",
    ),
    "stdin_gcd_without_import": (lcb_row(GCD), "a, b = map(int, input().split())\nprint(gcd(a, b))\n"),
    "stdin_counter_without_import": (
        lcb_row([stdin("aab\n", "a 2\n"), stdin("zzy\n", "z 2\n")]),
        "c = Counter(input().strip())\nk, v = c.most_common(1)[0]\nprint(k, v)\n",
    ),
    "stdin_deep_recursion": (
        lcb_row([stdin("20000\n", "20000\n")]),
        "def depth(n):\n    return 0 if n == 0 else 1 + depth(n - 1)\nprint(depth(int(input())))\n",
    ),
    "stdin_decimal_lines": (lcb_row([stdin("2\n", "1.0\n0.50\n")]), "input()\nprint(1)\nprint(0.5)\n"),
    "stdin_no_float_tolerance": (lcb_row([stdin("3\n", "0.33333333\n")]), "print('%.7f' % (1 / int(input())))\n"),
    "stdin_case_matters": (lcb_row([stdin("1\n", "Yes\n")]), "input()\nprint('yes')\n"),
    "stdin_error_after_the_answer": (
        lcb_row(ADD),
        "a, b = map(int, input().split())\nprint(a + b)\nraise ValueError\n",
    ),
    "functional_ac": (
        lcb_row([functional("[1, 2]\n3", "[1, 2, 3]")], func_name="push"),
        "class Solution:\n    def push(self, a, x):\n        return a + [x]\n",
    ),
    "functional_typing_names_without_import": (
        lcb_row([functional("[3, 1, 2]", "6")], func_name="total"),
        "class Solution:\n    def total(self, nums: List[int]) -> int:\n        return sum(nums)\n",
    ),
    "functional_one_for_true": (
        lcb_row([functional("3", "true"), functional("4", "false")], func_name="isOdd"),
        "class Solution:\n    def isOdd(self, n: int) -> bool:\n        return n % 2\n",
    ),
    "functional_float_error": (
        lcb_row([functional("1\n3", "0.3333333333333333")], func_name="div"),
        "class Solution:\n    def div(self, a, b):\n        return a / b + 1e-12\n",
    ),
    "functional_float_exact": (
        lcb_row([functional("1\n4", "0.25")], func_name="div"),
        "class Solution:\n    def div(self, a, b):\n        return a / b\n",
    ),
    "functional_nested_tuples": (
        lcb_row([functional("2", "[[0, 1], [1, 2]]")], func_name="pairs"),
        "class Solution:\n    def pairs(self, n):\n        return [(i, i + 1) for i in range(n)]\n",
    ),
    "functional_outer_tuple": (
        lcb_row([functional("2", "[0, 1]")], func_name="first"),
        "class Solution:\n    def first(self, n):\n        return tuple(range(n))\n",
    ),
    "functional_dict_subclasses": (
        lcb_row([functional('"abca"', '{"a": 2, "b": 1, "c": 1}')], func_name="counts"),
        "from collections import defaultdict\nclass Solution:\n    def counts(self, s):\n"
        "        out = defaultdict(int)\n        for c in s:\n            out[c] += 1\n        return out\n",
    ),
    "functional_namedtuple": (
        lcb_row([functional("3", "[3, 9]")], func_name="pair"),
        "from collections import namedtuple\nP = namedtuple('P', 'n square')\n"
        "class Solution:\n    def pair(self, n):\n        return P(n, n * n)\n",
    ),
    "functional_solution_over_a_function": (
        lcb_row([functional("3", "9")], func_name="sq"),
        "def sq(n):\n    return n * n\nclass Solution:\n    def sq(self, n):\n        return n + n\n",
    ),
    "functional_int_for_float": (
        lcb_row([functional("4", "2.0")], func_name="half"),
        "class Solution:\n    def half(self, n):\n        return n // 2\n",
    ),
    "functional_wrong": (
        lcb_row([functional("[1, 2]\n3", "[1, 2, 3]")], func_name="push"),
        "class Solution:\n    def push(self, a, x):\n        return [x] + a\n",
    ),
    "private_pass": (
        lcb_row(ADD, private=[stdin("100 200\n", "300\n"), stdin("-5 5\n", "0\n")]),
        "a, b = map(int, input().split())\nprint(a + b)\n",
    ),
    "private_fail": (
        lcb_row(ADD, private=[stdin("100 200\n", "300\n"), stdin("-5 5\n", "0\n")]),
        "a, b = map(int, input().split())\nprint(a + b if a > 0 else 1)\n",
    ),
    "private_fail_functional": (
        lcb_row([functional("2", "4")], private=[functional("3", "9")], func_name="square"),
        "class Solution:\n    def square(self, n):\n        return n + n\n",
    ),
}

# Where LiveCodeBench's harness is wrong about I/O, or its guard takes away what Python
# has (named: what of it breaks): plain Python's verdict, not LiveCodeBench's, is the
# code model's.
LCB_NOT_COPIED = {
    "io_iterating_stdin": (
        "for line in sys.stdin: iterates its mocked stdin, which has no __iter__",
        lcb_row([stdin(LINES, "6\n")]),
        "import sys\nlines = [line for line in sys.stdin]\nprint(sum(map(int, lines[1:])))\n",
    ),
    "io_open_0": (
        "open(0) is the prelude's unpatched open, reading the grader's own stdin",
        lcb_row([stdin(LINES, "6\n")]),
        "data = open(0).read().split()\nprint(sum(map(int, data[1:])))\n",
    ),
    "io_stdout_buffer": (
        "sys.stdout.buffer: its captured stdout is a StringIO",
        lcb_row(ADD),
        "import sys\na, b = map(int, input().split())\nsys.stdout.buffer.write(f'{a + b}\\n'.encode())\n",
    ),
    "io_os_write": (
        "os.write(1, ...) goes past its captured stdout",
        lcb_row(ADD),
        "import os\na, b = map(int, input().split())\nos.write(1, f'{a + b}\\n'.encode())\n",
    ),
    "io_stdin_buffer_readline": (
        "sys.stdin.buffer.readline gives the first line every time",
        lcb_row([stdin(LINES, "6\n")]),
        "import sys\nn = int(sys.stdin.buffer.readline())\n"
        "print(sum(int(sys.stdin.buffer.readline()) for _ in range(n)))\n",
    ),
    "io_readlines": (
        "sys.stdin.readlines() is its input split on newlines: a last empty line, no line ends",
        lcb_row([stdin(LINES, "6\n")]),
        "import sys\nlines = sys.stdin.readlines()\nprint(sum(int(line) for line in lines[1:]))\n",
    ),
    "guard_quit": (
        "quit(): its reliability_guard sets builtins.quit to None",
        lcb_row(ADD),
        "a, b = map(int, input().split())\nprint(a + b)\nquit()\n",
    ),
    "io_global_statement": (
        "a global statement: its harness wraps the program in a function",
        lcb_row(ADD),
        "total = 0\ndef add(x):\n    global total\n    total += x\n"
        "for v in map(int, input().split()):\n    add(v)\nprint(total)\n",
    ),
}


def lay_out_lcb(into: Path) -> Path:
    """The stored lcb_runner files as the package they are, under ``into``."""
    for name in LCB_FILES:
        target = into / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text((LCB_DATA / (name.replace("/", "_") + ".txt")).read_text())
    for package in ("lcb_runner", "lcb_runner/evaluation", "lcb_runner/benchmarks"):
        (into / package / "__init__.py").write_text("")
    return into


LCB_GRADE = """
import json, sys
sys.path.insert(0, sys.argv[1])
from lcb_runner.benchmarks.code_generation import CodeGenerationProblem
from lcb_runner.evaluation.compute_code_generation_metrics import evaluate_generations_by_problem
out = []
for row, code in json.load(sys.stdin):
    sample = CodeGenerationProblem(**row).get_evaluation_sample()
    (results,), _ = evaluate_generations_by_problem(([code], sample, False, 6))  # check_correctness per code
    out.append(bool(results) and all(bool(r > 0) for r in results))  # its pass_k_utils' rule
print(json.dumps(out))
"""


def grade_elsewhere(script: str, jobs: list, *args: str) -> list:
    done = subprocess.run(
        [sys.executable, "-c", script, *args],
        input=json.dumps(jobs),
        capture_output=True,
        text=True,
        timeout=GRADER_TIMEOUT_S,
        check=True,
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def lcb_verdicts(tmp_path_factory):
    root = lay_out_lcb(tmp_path_factory.mktemp("lcb"))
    rows = {**LCB_ROWS, **{name: (row, code) for name, (_, row, code) in LCB_NOT_COPIED.items()}}
    passed = grade_elsewhere(LCB_GRADE, list(rows.values()), str(root))
    return dict(zip(rows, passed))


def passes(code: str, reference, **options) -> bool:
    score = code_tests(code, reference, **options)
    return float(score) == 1.0


@pytest.mark.parametrize("name", list(LCB_ROWS))
def test_livecodebench_rows_get_livecodebench_s_verdict(name, lcb_verdicts):
    row, code = LCB_ROWS[name]
    assert passes(code, row) is lcb_verdicts[name], code_tests(code, row).tests


def test_the_rows_cover_both_verdicts_and_the_quirks(lcb_verdicts):
    """LiveCodeBench passes and fails what the issue measured: the set tests something."""
    expect_pass = {"stdin_exit_at_the_end", "stdin_gcd_without_import", "stdin_counter_without_import"}
    expect_pass |= {"stdin_deep_recursion", "functional_one_for_true", "functional_typing_names_without_import"}
    expect_pass |= {"functional_dict_subclasses", "functional_namedtuple", "stdin_nonzero_exit_after_the_answer"}
    expect_fail = {"stdin_undefined_annotation", "functional_float_error", "functional_nested_tuples"}
    expect_fail |= {"private_fail", "private_fail_functional", "stdin_future_import", "functional_future_import"}
    assert all(lcb_verdicts[name] for name in expect_pass)
    assert not any(lcb_verdicts[name] for name in expect_fail)


def plain_python_passes(code: str, row: dict, tmp_path: Path) -> bool:
    """``python3 prog.py`` on each public test, by LiveCodeBench's lines rule."""
    program = tmp_path / "prog.py"
    program.write_text(code)
    for case in json.loads(row["public_test_cases"]):
        run = subprocess.run(
            ["python3", str(program)], input=case["input"], capture_output=True, text=True, timeout=30, cwd=tmp_path
        )
        if run.returncode != 0 or not same_lines(run.stdout, case["output"]):
            return False
    return True


@pytest.mark.parametrize("name", list(LCB_NOT_COPIED))
def test_where_livecodebench_s_harness_is_wrong_plain_python_s_verdict_stands(name, lcb_verdicts, tmp_path):
    why, row, code = LCB_NOT_COPIED[name]
    assert lcb_verdicts[name] is False, f"LiveCodeBench's harness no longer fails this: {why}"
    assert plain_python_passes(code, row, tmp_path)
    assert passes(code, row), code_tests(code, row).tests


@pytest.mark.parametrize(
    "returned",
    [
        "type('Yes', (), {'__eq__': lambda self, other: True, '__hash__': object.__hash__})()",
        "type('Int', (int,), {'__eq__': lambda s, o: True, '__int__': lambda s: 9, '__hash__': int.__hash__})(0)",
        "type('Items', (list,), {'__eq__': lambda self, other: True, '__iter__': lambda self: iter([9])})()",
    ],
)
def test_a_result_that_says_it_equals_anything_passes_nothing(returned):
    """LiveCodeBench's ``prediction == expected`` asks the completion's object; here the
    result comes back as data (a subclass read through its base's own methods) and the
    comparison is the built-in one, under lcb and prime_code alike."""
    code = f"class Solution:\n    def sq(self, n):\n        return {returned}\n"
    row = lcb_row([functional("3", "9")], func_name="sq")
    assert float(code_tests(code, row)) == 0.0
    apps = {"input_output": json.dumps({"fn_name": "sq", "inputs": ["3"], "outputs": ["[9]"]})}
    assert float(code_tests(code, apps)) == 0.0


def test_a_harness_may_be_asked_for_over_the_row_s_shape():
    row, code = LCB_ROWS["stdin_gcd_without_import"]
    assert not passes(code, row, harness="plain")  # python3 prog.py: gcd is not defined
    exit_row, exit_code = LCB_ROWS["stdin_nonzero_exit_after_the_answer"]
    assert not passes(exit_code, exit_row, harness="plain")  # python3 prog.py: exit status 1
    future_row, future_code = LCB_ROWS["stdin_future_import"]
    assert passes(future_code, future_row, harness="plain")  # the prelude is not before it
    verl_shape = {"inputs": ["12 18\n"], "outputs": ["6\n"]}
    assert not passes(code, verl_shape)
    assert passes(code, verl_shape, harness="lcb") and passes(code, verl_shape, harness="prime_code")
    with pytest.raises(RuleError, match="harness"):
        code_tests(code, verl_shape, harness="human_eval")
    with pytest.raises(RuleError, match="harness"):
        code_tests(
            "def f():\n    return 1", {"test": "def check(f):\n    assert f() == 1", "entry_point": "f"}, harness="lcb"
        )
    with pytest.raises(RuleError, match="unknown harness"):
        code_tests(code, verl_shape, harness="codeforces")


def test_a_private_test_failed_scores_below_one_and_counts():
    row, code = LCB_ROWS["private_fail"]
    score = code_tests(code, row)
    assert [t["verdict"] for t in score.tests] == ["AC", "AC", "AC", "WA"]
    assert float(score) == 0.75
    as_json = {**row, "private_test_cases": json.dumps([stdin("-5 5\n", "0\n")])}  # also plain JSON text
    assert float(code_tests(code, as_json)) == 2 / 3


class Marker:
    """A pickle that would run a shell command where it is loaded."""

    def __init__(self, path: Path):
        self.path = path

    def __reduce__(self):
        return (os.system, (f"touch {self.path}",))


@pytest.mark.parametrize(
    "payload",
    ["system", "list", "dict", "int", "not_json", "not_zlib", "not_base64"],
)
def test_private_tests_that_cannot_be_read_make_the_row_invalid_and_run_nothing(payload, tmp_path):
    marker = tmp_path / "marker"
    pickled = {
        "system": pickle.dumps(Marker(marker)),
        "list": pickle.dumps([stdin("1 2\n", "3\n")]),
        "dict": pickle.dumps({"input": "1 2\n"}),
        "int": pickle.dumps(7),
        "not_json": pickle.dumps("not json ["),
    }
    if payload in pickled:
        field = base64.b64encode(zlib.compress(pickled[payload])).decode()
    else:
        field = {"not_zlib": base64.b64encode(b"plain bytes").decode(), "not_base64": "%%%"}[payload]
    row = {**LCB_ROWS["private_pass"][0], "private_test_cases": field}
    with pytest.raises(RuleError, match="private_test_cases"):
        code_tests("a, b = map(int, input().split())\nprint(a + b)\n", row)
    assert not marker.exists()


def test_private_tests_past_the_decompressed_cap_are_refused(monkeypatch):
    from rewardserve.models.rules.code import formats as code_formats

    monkeypatch.setattr(code_formats, "MAX_PRIVATE_BYTES", 1000)
    row = lcb_row(ADD, private=[stdin("1 2\n" * 500, "3\n")])
    with pytest.raises(RuleError, match="decompressed"):
        code_tests("print(3)", row)


def test_the_serving_process_leaves_compressed_private_tests_to_the_worker(monkeypatch):
    """The request-time check (in the serving process) never inflates or unpickles a
    compressed private-tests field; the worker does, and holds their count to the cap
    there: the item invalid, the request served."""
    from rewardserve.models.rules import code
    from rewardserve.models.rules.code import formats as code_formats

    def inflated(field):
        raise AssertionError("private tests decoded in the serving process")

    many = lcb_row(ADD, private=[stdin("1 2\n", "3\n")] * (code.MAX_TESTS + 1))
    with monkeypatch.context() as patched:
        patched.setattr(code_formats, "private_cases", inflated)
        assert code._limits("", many, {}) is None
        assert code._limits("", json.dumps(many), {}) is None
    with pytest.raises(RuleError, match="over the code model's limit"):
        code_tests("a, b = map(int, input().split())\nprint(a + b)\n", many)


async def test_through_the_service_python_is_python3_prog_py_and_a_bad_row_is_invalid(tmp_path):
    """/run_code (SandboxFusion's drop-in) and /v1/score run plain Python as
    ``python3 prog.py`` does; a row whose private tests hold another pickle is an
    invalid item naming why, and nothing of that pickle runs."""
    from rewardserve.service.settings import Settings
    from tests.harness import serve_in_process

    marker = tmp_path / "marker"
    row = {**LCB_ROWS["private_pass"][0]}
    row["private_test_cases"] = base64.b64encode(zlib.compress(pickle.dumps(Marker(marker)))).decode()
    programs = {
        "exit": "print(input())\nexit()\nprint('after')",
        "quit": "print(input())\nquit(0)",
        "annotation": "def f(x: Undefined):\n    return x\nprint(input())",
    }
    async with serve_in_process(Settings(models=[], builtin_rules=True)) as (_, client):
        runs = {
            name: (await client.post("/run_code", json={"code": code, "stdin": "hi\n", "language": "python"})).json()
            for name, code in programs.items()
        }
        scored = await client.post(
            "/v1/score",
            json={
                "model": "code",
                "items": [
                    {"response": "a, b = map(int, input().split())\nprint(gcd(a, b))", "reference": row},
                    {
                        "response": "a, b = map(int, input().split())\nprint(gcd(a, b))",
                        "reference": LCB_ROWS["stdin_gcd_without_import"][0],
                    },
                ],
                "options": {"code": {"harness": "lcb"}},
            },
        )
    assert runs["exit"]["status"] == "Success" and runs["exit"]["run_result"]["stdout"] == "hi\n", runs["exit"]
    assert runs["quit"]["status"] == "Success" and runs["quit"]["run_result"]["stdout"] == "hi\n", runs["quit"]
    assert runs["annotation"]["status"] == "Failed", runs["annotation"]
    assert "NameError" in runs["annotation"]["run_result"]["stderr"]
    assert scored.status_code == 200, scored.text
    bad, good = scored.json()["results"]
    assert bad["valid"] is False and "private_test_cases" in bad["error"], bad
    assert good["valid"] is True and good["score"] == 1.0, good
    assert not marker.exists()


# ------------------------------------------------------------------ APPS / TACO: prime_code


def verl_prime_code_available() -> Path:
    spec = importlib.util.find_spec("verl")
    if spec is None or spec.origin is None:
        pytest.skip("verl==0.9.1 is not installed (make install-dev installs it --no-deps)")
    return Path(spec.origin).parent / "utils" / "reward_score" / "prime_code"


# verl's prime_code package loaded from its files (``import verl`` pulls in ray).
PRIME_GRADE = """
import importlib.util, json, sys
spec = importlib.util.spec_from_file_location(
    "prime_code", sys.argv[1] + "/__init__.py", submodule_search_locations=[sys.argv[1]]
)
prime_code = importlib.util.module_from_spec(spec)
sys.modules["prime_code"] = prime_code
spec.loader.exec_module(prime_code)
out = []
for tests, code in json.load(sys.stdin):
    score, _ = prime_code.compute_score(code, json.dumps(tests), continuous=True)
    out.append(score is True or score == 1)
print(json.dumps(out))
"""

APPS_ROWS = {
    "stdin_ac": (
        {"inputs": ["1 2\n", "5 5\n"], "outputs": ["3\n", "10\n"]},
        "a, b = map(int, input().split())\nprint(a + b)\n",
    ),
    "stdin_wa": ({"inputs": ["1 2\n", "5 5\n"], "outputs": ["3\n", "10\n"]}, "print(3)\n"),
    "stdin_read_all": (
        {"inputs": ["2\n4 5\n"], "outputs": ["9\n"]},
        "import sys\nd = sys.stdin.read().split()\nprint(int(d[1]) + int(d[2]))\n",
    ),
    "stdin_gcd_without_import": (
        {"inputs": ["12 18\n"], "outputs": ["6\n"]},
        "a, b = map(int, input().split())\nprint(gcd(a, b))\n",
    ),
    "stdin_deep_recursion": (
        {"inputs": ["50000\n"], "outputs": ["50000\n"]},
        "def depth(n):\n    return 0 if n == 0 else 1 + depth(n - 1)\nprint(depth(int(input())))\n",
    ),
    "stdin_runtime_error": ({"inputs": ["1 2\n"], "outputs": ["3\n"]}, "print(3)\nraise ValueError\n"),
    "stdin_float_within_1e-5": ({"inputs": ["\n"], "outputs": ["1.0\n"]}, "print('1.00001')\n"),
    "stdin_float_past_1e-5": ({"inputs": ["\n"], "outputs": ["1.0\n"]}, "print('1.0001')\n"),
    "stdin_spaces_inside_a_line": ({"inputs": ["\n"], "outputs": ["1 2\n"]}, "print('1  2')\n"),
    "stdin_blank_lines_between": ({"inputs": ["\n"], "outputs": ["3\n7\n"]}, "print('3')\nprint()\nprint('7')\n"),
    "stdin_nonzero_exit_after_the_answer": (
        {"inputs": ["1 2\n"], "outputs": ["3\n"]},
        "import sys\na, b = map(int, input().split())\nprint(a + b)\nsys.exit(1)\n",
    ),
    "call_wrapped_output": (
        {"fn_name": "add", "inputs": ["1\n2", "5\n7"], "outputs": ["[3]", "[12]"]},
        "def add(a, b):\n    return a + b\n",
    ),
    "call_json_text": (
        {"fn_name": "add", "inputs": ["1\n2", "5\n7"], "outputs": ["3", "12"]},
        "def add(a, b):\n    return a + b\n",
    ),
    "call_one_for_true": (
        {"fn_name": "odd", "inputs": ["3", "4"], "outputs": ["[true]", "[false]"]},
        "def odd(n):\n    return n % 2\n",
    ),
    "call_float_error": (
        {"fn_name": "third", "inputs": ["1"], "outputs": ["[0.3333333333333333]"]},
        "def third(n):\n    return n / 3 + 1e-12\n",
    ),
    "call_list_of_tuples": (
        {"fn_name": "pairs", "inputs": ["2"], "outputs": ["[[[0, 1], [1, 2]]]"]},
        "def pairs(n):\n    return [(i, i + 1) for i in range(n)]\n",
    ),
    "call_solution_method": (
        {"fn_name": "twice", "inputs": ["4"], "outputs": ["[8]"]},
        "class Solution:\n    def twice(self, n):\n        return n * 2\n",
    ),
    "call_wrong": ({"fn_name": "add", "inputs": ["1\n2"], "outputs": ["[4]"]}, "def add(a, b):\n    return a + b\n"),
}


@pytest.fixture(scope="module")
def prime_code_verdicts():
    where = verl_prime_code_available()
    passed = grade_elsewhere(PRIME_GRADE, list(APPS_ROWS.values()), str(where))
    return dict(zip(APPS_ROWS, passed))


@pytest.mark.parametrize("name", list(APPS_ROWS))
def test_apps_and_taco_rows_get_verl_prime_code_s_verdict(name, prime_code_verdicts):
    tests, code = APPS_ROWS[name]
    row = {"problem_id": 1, "question": "", "input_output": json.dumps(tests)}  # APPS's shape
    assert passes(code, row) is prime_code_verdicts[name], code_tests(code, row).tests


def test_the_apps_rows_cover_both_verdicts(prime_code_verdicts):
    assert prime_code_verdicts["stdin_gcd_without_import"] and prime_code_verdicts["call_one_for_true"]
    assert prime_code_verdicts["stdin_float_within_1e-5"] and prime_code_verdicts["stdin_blank_lines_between"]
    assert not prime_code_verdicts["call_float_error"] and not prime_code_verdicts["stdin_wa"]
    assert not prime_code_verdicts["stdin_spaces_inside_a_line"]


def test_prime_code_s_guard_is_not_copied_exit_is_python_s():
    """prime_code's reliability_guard sets builtins.exit to None: exit() at a program's end
    fails there, and passes here as in python3 prog.py."""
    row = {"input_output": json.dumps({"inputs": ["1 2\n"], "outputs": ["3\n"]})}
    assert passes("a, b = map(int, input().split())\nprint(a + b)\nexit()\n", row)


# ------------------------------------------------------------------ plain Python, asserts apart

HUMAN_EVAL = {"test": "def check(f):\n    assert f(2) == 3\n", "entry_point": "f"}


@pytest.mark.parametrize(
    ("code", "passed"),
    [
        ("def f(x: Undefined):\n    return x + 1\n", False),  # python3 prog.py: NameError at the def
        ("from __future__ import annotations\ndef f(x: Undefined):\n    return x + 1\n", True),
        ("import pickle\nclass A:\n    n = 1\ndef f(x):\n    return x + pickle.loads(pickle.dumps(A())).n\n", True),
        ("import sys\ndef f(x):\n    return x + len(sys.argv)\n", True),  # no arguments: ['-c']
        ("def f(x):\n    return x + 1\nexit()\n", False),  # it left before the asserts
    ],
)
def test_an_assert_style_completion_runs_as_python3_prog_py_in_its_own_process(code, passed):
    assert float(code_tests(code, HUMAN_EVAL)) == float(passed)
