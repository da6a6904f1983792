"""The code model's inputs (code.py): the code in a response, and the tests in a
reference, in each peer's shape.

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
- MBPP: ``{"test_list": [...], "test_setup_code": ..., "test_imports": [...]}`` (an
  ``entry_point`` optional), one test per assert;
- stdin/stdout tests with a ``checker``: a Python program that judges each output in
  place of the comparison, as testlib's checkers do: it gets the files ``input.txt``,
  ``output.txt`` (the completion's) and ``answer.txt`` (the expected one), also as
  ``sys.argv[1:]``, with the input on stdin, and exits 0 to accept, 1 (or 2) to reject.
"""

from __future__ import annotations

import base64
import json
import re
from dataclasses import dataclass
from typing import Any

from rewardserve.models.rules import RuleError
from rewardserve.models.rules.code_compare import integer_text

LANGUAGES = {"python": ("python", "py", "python3"), "cpp": ("cpp", "c++", "cc", "cxx")}
# Before the JSON line a harness prints after the program (a call's result, a grader's).
RESULT_MARKER = "\x1erewardserve-result\x1e"
_FENCE = re.compile(r"```([^\n`]*)\n(.*?)```", re.S)


def extract_code(response: str, language: str = "python") -> str:
    blocks = _FENCE.findall(response)
    tags = LANGUAGES[language]
    tagged = [body for tag, body in blocks if tag.strip().lower() in tags]
    if tagged:
        return str(tagged[-1])
    untagged = [body for tag, body in blocks if not tag.strip()]
    return str(untagged[-1]) if untagged else response


def tests_of(reference: Any) -> dict[str, Any]:
    """The reference as one object of tests (JSON text parsed, a peer's row read into
    inputs and outputs). The readers below take either form: read it once with this,
    then hand them what it gives."""
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
        return tests_of(reference["input_output"])
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
    ref = tests_of(reference)
    if "inputs" in ref and "outputs" in ref:
        inputs, outputs = ref["inputs"], ref["outputs"]
        if not isinstance(inputs, list) or not isinstance(outputs, list) or len(inputs) != len(outputs):
            raise RuleError("reference inputs and outputs must be lists of the same length")
        fn = ref.get("fn_name")
        if fn:
            if not isinstance(fn, str) or not fn.isidentifier():
                raise RuleError(f"fn_name {str(fn)[:40]!r} is not a Python name")
            tests = [{"after": _call_harness(fn, _arguments(i))} for i in inputs]
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
        test = {"after": f"{ref['test']}\ncheck({entry})\n", "entry": entry}
        if isinstance(prompt, str):  # its helpers (human-eval's poly) are the reference's on the test's side
            test["prompt"] = prompt
        return code, [test], [None], "asserts"
    if "test_list" in ref:
        asserts = ref["test_list"]
        if not isinstance(asserts, list) or not all(isinstance(a, str) for a in asserts):
            raise RuleError("test_list must be a list of assert statements")
        imports = ref.get("test_imports") or []  # sanitized MBPP's: the asserts' own imports
        if not isinstance(imports, list) or not all(isinstance(line, str) for line in imports):
            raise RuleError("test_imports must be a list of import lines")
        setup = "\n".join([*imports, ref.get("test_setup_code") or ""])
        # The function under test, where the reference names it (MBPP names none): bound
        # even where a built-in has its name (MBPP's `sum`), which the asserts then call.
        named = ref.get("entry_point")
        if named is not None and (not isinstance(named, str) or not named.isidentifier()):
            raise RuleError(f"entry_point {str(named)[:40]!r} is not a Python name")
        tests = [{"before": setup, "after": a, **({"entry": named} if named else {})} for a in asserts]
        return code, tests, [None] * len(asserts), "asserts"
    raise RuleError("the code model's reference has no tests: {inputs, outputs}, {test, entry_point} or {test_list}")


def checker_source(reference: Any) -> str | None:
    """The reference's checker program (``checker``: Python source), if it has one."""
    ref = tests_of(reference)
    checker = ref.get("checker")
    if checker is None:
        return None
    if not isinstance(checker, str) or not checker.strip():
        raise RuleError("checker must be a program's source (Python)")
    return checker


MAX_FILES = 64
MAX_FILES_BYTES = 16 << 20  # all of an item's files, decoded (the sandbox's /tmp holds 64 MiB)


def plain_path(path: Any) -> str:
    """A file's path in the sandbox's working directory: relative, with no ``..``, no
    empty or ``.`` parts (``a//b``, ``./a`` are refused, not rewritten)."""
    if not isinstance(path, str) or not path or len(path) > 255 or "\x00" in path:
        raise RuleError(f"file path {str(path)[:60]!r}: a relative path of 1 to 255 characters")
    if path.startswith("/") or any(part in ("", ".", "..") for part in path.split("/")):
        raise RuleError(f"file path {path[:60]!r}: relative, without '..', '.' or empty parts")
    return path


def files_of(reference: Any) -> tuple[dict[str, bytes], list[str]]:
    """SandboxFusion's ``files`` ({path: base64, or null to skip}) written before each
    test, and ``fetch_files`` (paths) read back after it."""
    ref = tests_of(reference)
    files, fetch = ref.get("files") or {}, ref.get("fetch_files") or []
    if not isinstance(files, dict) or not isinstance(fetch, list):
        raise RuleError("files must be {path: base64} and fetch_files a list of paths")
    if len(files) > MAX_FILES or len(fetch) > MAX_FILES:
        raise RuleError(f"over {MAX_FILES} files or fetch_files")
    decoded: dict[str, bytes] = {}
    for path, content in files.items():
        if content is None:
            continue
        where = plain_path(path)
        try:
            decoded[where] = base64.b64decode(content, validate=True)
        except (TypeError, ValueError):
            raise RuleError(f"file {str(path)[:60]!r}: its content is not base64") from None
    if sum(map(len, decoded.values())) > MAX_FILES_BYTES:
        raise RuleError(f"the files hold over {MAX_FILES_BYTES} bytes")
    return decoded, [plain_path(p) for p in fetch]


def _arguments(value: Any) -> str:
    """A call-based test's arguments as the text of a JSON list. Lines of JSON text stay
    text (checked, not rebuilt): an integer too long for this process's int() is the
    sandbox's to read, where integers have no such limit."""
    if isinstance(value, str):
        lines = [line.strip() for line in value.split("\n") if line.strip()]
        try:
            for line in lines:
                json_value(line)
        except ValueError:
            raise RuleError("a call-based input line is not JSON") from None
        return "[" + ", ".join(lines) + "]"
    return json.dumps(list(value) if isinstance(value, list) else [value])


@dataclass(frozen=True)
class LongInteger:
    """A JSON integer too long for int() (Python's limit on an integer's text, which
    keeps a long one from costing this process quadratic time): compared by its text."""

    text: str


def _integer(text: str) -> int | LongInteger:
    return int(text) if len(text) <= 4000 else LongInteger(integer_text(text))


def json_value(text: str) -> Any:
    """JSON text's value, with integers of any length (LongInteger past int()'s limit)."""
    return json.loads(text, parse_int=_integer)


def _expected_value(value: Any) -> Any:
    if isinstance(value, str):
        try:
            return json_value(value)
        except ValueError:
            return value
    return value


def _call_harness(fn: str, args: str) -> str:
    """Run after the program in its globals: the function (or Solution's method) on the
    arguments (a JSON list's text), its result as one JSON line after a blank separator."""
    return (
        "import json as _rs_json\n"
        f"_rs_fn = globals().get({fn!r}) or getattr(globals()['Solution'](), {fn!r})\n"
        f"_rs_out = _rs_fn(*_rs_json.loads({json.dumps(args)}))\n"
        f"print()\nprint({RESULT_MARKER!r} + _rs_json.dumps(_rs_out, default=repr))\n"
    )


def call_result(stdout: str) -> Any:
    at = stdout.rfind(RESULT_MARKER)
    if at < 0:
        raise ValueError("no result")
    return json_value(stdout[at + len(RESULT_MARKER) :].strip())
