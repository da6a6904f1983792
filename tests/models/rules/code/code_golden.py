"""Golden (got, want) output pairs for the code model's comparison modes, each mode checked
against its peer's own function on all of them: pairs written for floats, whitespace,
empty output, unicode and huge output, then pairs a seeded generator builds by mutating
an expected output the ways programs get it wrong or almost right."""

from __future__ import annotations

import random

WRITTEN: list[tuple[str, str]] = [
    ("3\n", "3"),
    ("3   \n\n\n", "3\n"),
    ("1 2\r\n3\r\n", "1 2\n3\n"),
    ("0.3333333", "0.33333333"),
    ("0.33333333", "0.33333333"),
    ("1e6", "1000000"),
    ("1000001", "1000000"),
    ("50000000000000000", "50000000000000001"),
    ("3.14159265", "3.14159266"),
    ("1.0", "1"),
    ("1.000000", "1"),
    ("0.50", "0.5"),
    (".5", "0.5"),
    ("-0", "0"),
    ("-0.0", "0"),
    ("+1", "1"),
    ("1_000", "1000"),
    ("0x10", "16"),
    ("1,5", "1.5"),
    ("1e-7", "0"),
    ("inf", "Infinity"),
    ("-inf", "-Infinity"),
    ("nan", "nan"),
    ("NaN", "nan"),
    ("nan", "NaN"),
    ("1e999999", "1e999999"),
    ("1E3", "1e3"),
    ("YES", "yes"),
    ("True", "true"),
    ("[1, 2]", "[1,2]"),
    ("1 2", "1\n2"),
    ("1 2 3", "1 2  3"),
    ("a\tb", "a b"),
    ("1\n\n2", "1\n2"),
    ("\n\n1", "1"),
    ("1\n2\n", "1\n2\n3"),
    ("1\n2\n3", "1\n2"),
    ("", ""),
    ("", "0"),
    ("0", ""),
    ("\n", ""),
    ("   ", ""),
    ("\r", ""),
    ("\x00", "\x00"),
    ("\x00", ""),
    ("a\x0cb", "a b"),
    ("héllo wörld", "héllo  wörld"),
    ("héllo", "he\u0301llo"),
    ("١٢٣", "123"),
    ("½", "0.5"),
    ("\u00a01\u00a0", "1"),
    ("1\u20032", "1 2"),
    ("日本 語", "日本 語\n"),
    ("🙂", "🙂 "),
    ("x" * 300_000, "x" * 300_000),
    ("x" * 300_000, "x" * 299_999),
    ("1\n" * 50_000, "1\n" * 50_000),
    ("1\n" * 50_000, "1\n" * 49_999),
    ("1.0 " * 20_000, "1 " * 20_000),
    ("9" * 5000, "9" * 5000),
    ("9" * 5000, "9" * 4999 + "8"),
]

TOKENS = [
    "0", "1", "-1", "+1", "01", "1.0", "1.00", "0.5", ".5", "1e3", "1000", "1E3", "nan", "NaN",
    "inf", "-inf", "abc", "ABC", "Yes", "yes", "١", "½", "3.0000001", "3", "2.9999999",
    "100000000000000000001", "100000000000000000000", "-0", "0.0", "1_0", "10", "é",
]  # fmt: skip


def _line(rng: random.Random) -> str:
    return rng.choice([" ", "  ", "\t"]).join(rng.choice(TOKENS) for _ in range(rng.randint(0, 4)))


def _mutated(want: str, rng: random.Random) -> str:
    lines = want.split("\n")
    how = rng.randrange(9)
    if how == 1:  # one token swapped for another
        at = rng.randrange(len(lines))
        tokens = lines[at].split(" ")
        tokens[rng.randrange(len(tokens))] = rng.choice(TOKENS)
        lines[at] = " ".join(tokens)
    elif how == 2:
        at = rng.randrange(len(lines))
        lines[at] += rng.choice([" ", "  ", "\t"])
    elif how == 3:
        return want + "\n" if rng.random() < 0.5 else want.rstrip("\n")
    elif how == 4:
        lines = lines[:-1] if len(lines) > 1 else lines + [_line(rng)]
    elif how == 5:
        return " ".join(want.split())
    elif how == 6:
        return want.replace("\n", "\r\n")
    elif how == 7:
        return want.upper()
    elif how == 8:
        lines.insert(rng.randrange(len(lines) + 1), "")
    return "\n".join(lines)


def golden(generated: int = 240, seed: int = 40) -> list[tuple[str, str]]:
    rng = random.Random(seed)
    pairs = list(WRITTEN)
    for _ in range(generated):
        want = "\n".join(_line(rng) for _ in range(rng.randint(1, 3))) + rng.choice(["", "\n", "\n\n", "  \n"])
        pairs.append((_mutated(want, rng), want))
    return pairs
