"""The code SandboxFusion's server runs for a completion (its ``default_extract_helper``),
for ``POST /submit``: the code model's own rule (formats.extract_code) differs.

SandboxFusion collects blocks of three priorities and keeps those of the highest:
closed fenced blocks (30); the text after the first fence line, to the end, where that
fence has a line break after it (20); for Python, unfenced ``def`` / ``class`` blocks with
an indented body and the ``import`` / ``from`` / ``#`` lines just before them, blank lines
dropped (10). Of the kept blocks it runs the first tagged with the language (by its exact
alias list: ``py`` but not ``PY3``), else the first; with no block, nothing (empty code).

SandboxFusion finds these with backtracking regular expressions, which take quadratic time
on some inputs (a fence followed by a long run of newlines); this module finds the same
blocks in one pass, so a hostile completion costs linear time.
"""

from __future__ import annotations

import re

FENCE = "```"
ALIASES = {"python": ("python", "Python", "py", "Python3", "python3", "PY"), "cpp": ("cpp", "c++", "C++", "Cpp", "CPP")}
_SPACE = re.compile(r"\s*")
_PRELUDES = ("import", "from", "#")
_HEADERS = ("def ", "class ")


def sandbox_fusion_code(completion: str, language: str) -> str:
    aliases = ALIASES.get(language, ())
    closed = _closed_blocks(completion)
    if closed:
        return next((code for tag, code in closed if tag.strip() in aliases), closed[0][1])
    first = completion.find(FENCE)
    line_end = completion.find("\n", first + len(FENCE)) if first != -1 else -1
    if line_end != -1:
        return completion[line_end + 1 :]
    if language == "python":
        return next(iter(_python_blocks(completion)), "")
    return ""


def _closed_blocks(text: str) -> list[tuple[str, str]]:
    """(tag, code) of each fence line, then code up to a line break, any whitespace and a
    fence, as ``re.findall`` would give them left to right."""
    blocks: list[tuple[str, str]] = []
    at = text.find(FENCE)
    while at != -1:
        line_end = text.find("\n", at + len(FENCE))
        if line_end == -1:
            break
        closing = _closing(text, line_end + 1)
        if closing is None:  # nor can any later fence close: no line break and fence follows
            break
        code_end, fence_at = closing
        blocks.append((text[at + len(FENCE) : line_end], text[line_end + 1 : code_end]))
        at = text.find(FENCE, fence_at + len(FENCE))
    return blocks


def _closing(text: str, start: int) -> tuple[int, int] | None:
    """The first line break at or after ``start`` that only whitespace separates from a
    fence: (where it is, where the fence is). The line breaks inside one run of whitespace
    reach the same character, so each run is read once."""
    newline = text.find("\n", start)
    while newline != -1:
        space = _SPACE.match(text, newline + 1)  # it always matches, if only the empty string
        after = space.end() if space else newline + 1
        if text.startswith(FENCE, after):
            return newline, after
        newline = text.find("\n", after)
    return None


def _python_blocks(text: str) -> list[str]:
    lines = [line for line in text.split("\n") if line.strip()]
    blocks: list[str] = []
    at = 0
    while at < len(lines):
        header = at
        while header < len(lines) and _is_prelude(lines[header]):
            header += 1
        end = header + 1
        if header < len(lines) and _is_header(lines[header]):
            while end < len(lines) and lines[end][0].isspace():
                end += 1
        if end > header + 1:
            blocks.append("".join(line + "\n" for line in lines[at:end]))
            at = end
        else:  # nor can a match start inside this run of prelude lines
            at = header + 1
    return blocks


def _is_prelude(line: str) -> bool:
    return any(line.startswith(word) and len(line) > len(word) for word in _PRELUDES)


def _is_header(line: str) -> bool:
    return any(line.startswith(word) and len(line) > len(word) for word in _HEADERS)
