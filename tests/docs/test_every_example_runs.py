"""Every fenced block of every page on the site (mkdocs.yml's nav) is either run by one of
the docs runners (tests/test_readme.py, tests/docs/test_trainer_quickstarts.py) or marked
``<!-- readme-test: not run; why -->`` with its reason: an example no test runs can rot
unseen. The runners find blocks with ``tests.test_readme.FENCE``; a block it does not see
(a fence with no language, ``~~~``, four backticks) would be skipped without a word, so
the fences are read here line by line, as Markdown reads them, and matched to the
runners' blocks.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass

import yaml

from tests.docs import test_trainer_quickstarts
from tests.test_readme import FENCE, ROOT
from tests.test_readme import PAGES as README_PAGES

# What the runners run: a block of these languages, on these pages, unless marked.
RUN_LANGUAGES = {"bash", "python", "yaml"}
RUN_PAGES = {*README_PAGES, *test_trainer_quickstarts.PAGES}
# The site's home is the README with its links made relative (tests/test_readme.py
# test_the_site_home_is_the_readme): its blocks are the README's, run there.
SAME_AS = {"docs/index.md": "README.md"}

OPENING = re.compile(r"^(?P<indent> {0,3})(?P<fence>`{3,}|~{3,})(?P<info>[^`]*)$")


@dataclass(frozen=True)
class Block:
    line: int  # 1-based, the opening fence's
    offset: int  # of the opening fence's first backtick in the page
    info: str
    first: str  # the block's first line, to name it


def site_pages() -> list[str]:
    """The nav's pages, as paths from the repository root."""
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"))

    def walk(node: object) -> Iterator[str]:
        if isinstance(node, str):
            yield node
        elif isinstance(node, list):
            for entry in node:
                yield from walk(entry)
        elif isinstance(node, dict):
            for value in node.values():
                yield from walk(value)

    return [f"docs/{page}" for page in walk(config["nav"])]


def fenced_blocks(text: str) -> list[Block]:
    """The fenced code blocks of a Markdown page (CommonMark's rule: a fence closes on a
    line of the same character, at least as long, with nothing after it)."""
    found: list[Block] = []
    lines = text.splitlines(keepends=True)
    offset, k = 0, 0
    while k < len(lines):
        opening = OPENING.match(lines[k].rstrip("\n"))
        if opening is None:
            offset += len(lines[k])
            k += 1
            continue
        fence = opening["fence"]
        closing = re.compile(rf"^ {{0,3}}{re.escape(fence[0])}{{{len(fence)},}}\s*$")
        end = k + 1
        while end < len(lines) and not closing.match(lines[end].rstrip("\n")):
            end += 1
        first = lines[k + 1].strip() if k + 1 < end else ""
        found.append(Block(k + 1, offset + len(opening["indent"]), opening["info"].strip(), first))
        offset += sum(len(line) for line in lines[k : end + 1])
        k = end + 1
    return found


def unaccounted(page: str) -> list[str]:
    """The blocks of ``page`` that no runner runs and no marker explains, each named."""
    text = (ROOT / page).read_text(encoding="utf-8")
    runner_page = SAME_AS.get(page, page)
    # What the runners see: the fence's offset, its language, the marker's reason.
    seen = {m.start("lang") - 3: (m["lang"], m["why"]) for m in FENCE.finditer(text)}
    problems = []
    for block in fenced_blocks(text):
        where = f"{page}:{block.line}: ```{block.info} block {block.first[:60]!r}"
        if block.offset not in seen:
            problems.append(f"{where}: the runners cannot see it (give the fence a language)")
            continue
        lang, why = seen[block.offset]
        if why is not None:
            if len(why) <= 20:
                problems.append(f"{where}: marked not run without a reason")
        elif runner_page not in RUN_PAGES:
            problems.append(f"{where}: no runner runs this page, and the block is not marked not run")
        elif lang not in RUN_LANGUAGES:
            problems.append(f"{where}: the runners do not run {lang} blocks, and the block is not marked not run")
    return problems


def test_the_guard_reads_fences_as_markdown_does():
    """A bare fence, a tilde fence and a four-backtick fence holding a three-backtick one
    are blocks; the inner fence is not a block of its own."""
    text = "a\n```\nx\n```\n~~~python\ny\n~~~\n````md\n```bash\nz\n```\n````\n  ```bash\nw\n  ```\n"
    blocks = fenced_blocks(text)
    assert [(b.line, b.info, b.first) for b in blocks] == [
        (2, "", "x"),
        (5, "python", "y"),
        (8, "md", "```bash"),
        (13, "bash", "w"),
    ]
    assert [text[b.offset : b.offset + 3] for b in blocks] == ["```", "~~~", "```", "```"]


def test_every_block_of_every_site_page_runs_or_says_why_not():
    pages = site_pages()
    assert "docs/lifecycle.md" in pages and "docs/reference/options.md" in pages
    problems = [problem for page in pages for problem in unaccounted(page)]
    assert not problems, "\n".join(problems)
