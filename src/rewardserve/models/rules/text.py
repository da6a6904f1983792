"""Text rules: exact match, regex, BLEU / chrF (sacrebleu), ROUGE (rouge-score), fuzzy
ratio (rapidfuzz).

Caps where the cost is more than linear: rapidfuzz's ``partial_ratio`` grows with the
shorter text squared times the longer, so the shorter text is capped at 1,000 characters;
ROUGE-L's longest common subsequence is words x words in Python, so that product is
capped at 1,000,000 (each cap keeps one call well under the rule pool's time limit).
"""

from __future__ import annotations

import re
import string
from typing import Any

from rewardserve.models.rules import Limit, RuleError, over, reference_texts, rule, text_references

_BOXED = re.compile(r"\\boxed\s*\{")
_ARTICLES = re.compile(r"\b(a|an|the)\b")
MAX_PATTERN = 1000
MAX_PARTIAL_SHORTER = 1_000
MAX_FUZZY_CHARS = 100_000
MAX_LCS_WORDS_PRODUCT = 1_000_000
MAX_ROUGE_WORDS = 100_000


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
    references = text_references(reference, "exact_match")
    if extract == "boxed":
        response = last_boxed(response) or response
    elif extract == "last_line":
        lines = [line for line in response.splitlines() if line.strip()]
        response = lines[-1] if lines else ""
    elif extract != "none":
        raise RuleError(f"exact_match: unknown extract {extract!r}")

    def norm(text: Any) -> str:
        return normalize_text(str(text), case=case_sensitive, punctuation=keep_punctuation, articles=keep_articles)

    answer = norm(response)
    return float(any(answer == norm(ref) for ref in references))


@rule("regex")
def regex(
    response: str,
    reference: Any = None,
    *,
    pattern: str | None = None,
    mode: str = "search",
    flags: str = "",
    **_: Any,
) -> float:
    """1.0 when ``pattern`` (or the reference) matches: ``search`` anywhere, ``full`` the
    whole response. ``flags``: any of ``i`` (ignore case), ``m`` (multiline), ``s``
    (dot matches newline). A catastrophic pattern times out alone in its pool worker."""
    pattern = pattern if pattern is not None else reference
    if not isinstance(pattern, str) or not pattern:
        raise RuleError("regex needs a 'pattern' argument (or the reference as pattern)")
    if len(pattern) > MAX_PATTERN:
        raise RuleError(f"regex pattern is over {MAX_PATTERN} characters")
    bits = {"i": re.IGNORECASE, "m": re.MULTILINE, "s": re.DOTALL}
    try:
        compiled = re.compile(pattern, sum(bits[f] for f in flags))
    except (re.error, KeyError) as exc:
        raise RuleError(f"invalid regex: {exc}") from exc
    match = compiled.fullmatch(response) if mode == "full" else compiled.search(response)
    return float(match is not None)


@rule("bleu")
def bleu(response: str, reference: Any, **_: Any) -> float:
    """Sentence BLEU (sacrebleu, its default tokenizer and smoothing), 0..1."""
    import sacrebleu

    return sacrebleu.sentence_bleu(response, text_references(reference, "bleu")).score / 100.0


@rule("chrf")
def chrf(response: str, reference: Any, *, word_order: int = 0, **_: Any) -> float:
    """Sentence chrF (chrF++ with ``word_order=2``), 0..1."""
    import sacrebleu

    refs = text_references(reference, "chrf")
    return sacrebleu.sentence_chrf(response, refs, word_order=word_order).score / 100.0


def _rouge_limits(response: str, reference: Any, args: dict[str, Any]) -> Limit | None:
    words = len(response.split())
    problem = over("response", words, MAX_ROUGE_WORDS, "words")
    for ref in reference_texts(reference):
        ref_words = len(ref.split())
        problem = problem or over("reference", ref_words, MAX_ROUGE_WORDS, "words")
        if problem is None and args.get("variant", "rougeL") in ("rougeL", "rougeLsum"):
            problem = over("response", words * ref_words, MAX_LCS_WORDS_PRODUCT, "words x reference words (ROUGE-L)")
    return problem


@rule("rouge", limits=_rouge_limits)
def rouge(response: str, reference: Any, *, variant: str = "rougeL", measure: str = "fmeasure", **_: Any) -> float:
    """ROUGE (rouge-score; ``rouge1``, ``rouge2``, ``rougeL``, ``rougeLsum``), best over
    the references."""
    from rouge_score import rouge_scorer  # type: ignore[import-untyped]  # ships no type information

    if variant not in ("rouge1", "rouge2", "rougeL", "rougeLsum"):
        raise RuleError(f"rouge: unknown variant {variant!r}")
    if measure not in ("precision", "recall", "fmeasure"):
        raise RuleError(f"rouge: unknown measure {measure!r}")
    scorer = rouge_scorer.RougeScorer([variant], use_stemmer=True)
    refs = text_references(reference, "rouge")
    best: float = max(getattr(scorer.score(ref, response)[variant], measure) for ref in refs)
    return best


def _fuzzy_limits(response: str, reference: Any, args: dict[str, Any]) -> Limit | None:
    problem = over("response", len(response), MAX_FUZZY_CHARS)
    for ref in reference_texts(reference):
        problem = problem or over("reference", len(ref), MAX_FUZZY_CHARS)
        if problem is None and args.get("method") == "partial_ratio":
            shorter = "response" if len(response) <= len(ref) else "reference"
            problem = over(
                shorter,
                min(len(response), len(ref)),
                MAX_PARTIAL_SHORTER,
                "characters (the shorter text, for partial_ratio)",
            )
    return problem


@rule("fuzzy", limits=_fuzzy_limits)
def fuzzy(response: str, reference: Any, *, method: str = "ratio", **_: Any) -> float:
    """rapidfuzz similarity, 0..1 (``ratio``, ``partial_ratio``, ``token_sort_ratio``,
    ``token_set_ratio``), best over the references."""
    from rapidfuzz import fuzz

    scorer = getattr(fuzz, method, None)
    if method not in ("ratio", "partial_ratio", "token_sort_ratio", "token_set_ratio") or not scorer:
        raise RuleError(f"fuzzy: unknown method {method!r}")
    best: float = max(scorer(response, ref) / 100.0 for ref in text_references(reference, "fuzzy"))
    return best
