"""Text rules."""

from __future__ import annotations

import re
import string
from typing import Any

from rewardserve.models.rules import RuleError, rule

_BOXED = re.compile(r"\\boxed\s*\{")
_ARTICLES = re.compile(r"\b(a|an|the)\b")


def last_boxed(text: str) -> str | None:
    """The content of the last ``\\boxed{...}``, braces balanced, or None."""
    starts = [m.end() for m in _BOXED.finditer(text)]
    if not starts:
        return None
    depth, start = 1, starts[-1]
    for pos in range(start, len(text)):
        if text[pos] == "{":
            depth += 1
        elif text[pos] == "}":
            depth -= 1
            if depth == 0:
                return text[start:pos]
    return None


def normalize_text(text: str, *, case: bool, punctuation: bool, articles: bool) -> str:
    if not case:
        text = text.casefold()
    if not punctuation:
        text = text.translate(str.maketrans("", "", string.punctuation))
    if not articles:
        text = _ARTICLES.sub(" ", text)
    return " ".join(text.split())


@rule("exact_match")
def exact_match(
    response: str,
    reference: Any,
    *,
    extract: str = "boxed",
    case_sensitive: bool = False,
    keep_punctuation: bool = True,
    keep_articles: bool = True,
    **_: Any,
) -> float:
    """1.0 when the response equals the reference (any of them, for a list).

    extract: ``boxed`` compares the last ``\\boxed{}`` when there is one, ``none`` the
    whole response, ``last_line`` its last non-empty line. Whitespace is always
    collapsed; case, punctuation and articles (SQuAD's normalisation) by choice.
    """
    if reference is None:
        raise RuleError("exact_match needs a 'reference'")
    references = reference if isinstance(reference, list) else [reference]
    if extract == "boxed":
        response = last_boxed(response) or response
    elif extract == "last_line":
        lines = [line for line in response.splitlines() if line.strip()]
        response = lines[-1] if lines else ""
    elif extract != "none":
        raise RuleError(f"exact_match: unknown extract {extract!r}")

    def norm(text: Any) -> str:
        return normalize_text(
            str(text), case=case_sensitive, punctuation=keep_punctuation, articles=keep_articles
        )

    answer = norm(response)
    return float(any(answer == norm(ref) for ref in references))
