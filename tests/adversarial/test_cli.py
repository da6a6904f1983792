"""The offline CLI against hostile files (issue 37, holes 17-18): ``score -o`` never
overwrites a file that is not its own output (nor its input) and writes to a stream
without reading it back; inputs nested too deeply, a 40 MB line or a directory are one
line on stderr, never a traceback."""

from __future__ import annotations

import json
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from tests.adversarial.conftest import KEY_A


def score(attacked, *args: str, stdout=subprocess.PIPE) -> subprocess.CompletedProcess:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "rewardserve.cli",
            "score",
            "--url",
            attacked.url,
            "--api-key",
            KEY_A,
            "--model",
            "math",
            *args,
        ],
        stdout=stdout,
        stderr=subprocess.PIPE,
        text=True,
        timeout=120,
    )


def one_line_error(done: subprocess.CompletedProcess, says: str) -> None:
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1 and lines[0].startswith("rewardserve: error:"), done.stderr
    assert says in lines[0], lines[0]


def test_score_never_destroys_a_file_that_is_not_its_output(attacked, tmp_path: Path):
    items = tmp_path / "items.jsonl"
    items.write_text("".join(json.dumps({"response": rf"\boxed{{{n}}}", "reference": str(n)}) + "\n" for n in range(3)))
    original = items.read_bytes()
    notes = tmp_path / "notes.txt"
    notes.write_text("my notes, not results\nsecond line\n")
    with ThreadPoolExecutor(3) as side_by_side:
        into_notes = side_by_side.submit(score, attacked, str(items), "-o", str(notes))
        into_input = side_by_side.submit(score, attacked, str(items), "-o", str(items))
        # To a stream: written straight, never read back (a pipe here).
        streaming = side_by_side.submit(score, attacked, str(items), "-o", "/dev/stdout")
    one_line_error(into_notes.result(), "not the output of this command")
    assert notes.read_text() == "my notes, not results\nsecond line\n"
    one_line_error(into_input.result(), "is the input file")
    assert items.read_bytes() == original
    streamed = streaming.result()
    assert streamed.returncode == 0, streamed.stderr
    lines = [json.loads(line) for line in streamed.stdout.splitlines() if line.startswith("{")]
    assert [line["score"] for line in lines] == [1.0, 1.0, 1.0]
    # Its own output is resumed, never truncated.
    out = tmp_path / "out.jsonl"
    assert score(attacked, str(items), "-o", str(out)).returncode == 0
    assert score(attacked, str(items), "-o", str(out)).returncode == 0
    assert [json.loads(line)["index"] for line in out.read_text().splitlines()] == [0, 1, 2]


def test_hostile_inputs_are_one_line_errors(attacked, tmp_path: Path):
    deep = tmp_path / "deep.jsonl"
    deep.write_text("[" * 100_000 + "]" * 100_000 + "\n")
    long = tmp_path / "long.jsonl"
    long.write_text(json.dumps({"response": "x" * 40_000_000}) + "\n")
    cases = {deep: "nested too deeply", long: "over 16777216 bytes", tmp_path: "is a directory"}
    with ThreadPoolExecutor(len(cases)) as side_by_side:
        runs = {
            path: side_by_side.submit(score, attacked, str(path), "-o", str(tmp_path / "out-never.jsonl"))
            for path in cases
        }
    for path, says in cases.items():
        one_line_error(runs[path].result(), says)
    assert not (tmp_path / "out-never.jsonl").exists()
