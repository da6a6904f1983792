"""A safe arithmetic evaluator for rubric formulas, e.g.
``0.7 * correct + 0.3 * min(format, concise)`` or ``correct if safe > 0.5 else 0``.

The formula is parsed with ``ast`` and only arithmetic is allowed: numbers, the rubric's
criterion names, + - * / // % **, comparisons, and/or/not, if-else, and the functions
below. No attribute access, no subscripts, no strings, no other calls, no ``eval``.
Exponents and sizes are bounded so a formula cannot eat the CPU.
"""

from __future__ import annotations

import ast
import math
import operator
from collections.abc import Callable
from typing import cast

MAX_LENGTH = 2000
MAX_NODES = 300
MAX_EXPONENT = 64
MAX_MAGNITUDE = 1e12

FUNCTIONS: dict[str, Callable[..., float]] = {
    "min": min,
    "max": max,
    "abs": abs,
    "clip": lambda x, lo, hi: min(max(x, lo), hi),
    "mean": lambda *xs: sum(xs) / len(xs),
    "sqrt": math.sqrt,
    "log": math.log,
    "exp": math.exp,
}
_BINARY = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}
_COMPARE = {
    ast.Lt: operator.lt,
    ast.LtE: operator.le,
    ast.Gt: operator.gt,
    ast.GtE: operator.ge,
    ast.Eq: operator.eq,
    ast.NotEq: operator.ne,
}


class FormulaError(ValueError):
    pass


def compile_formula(source: str, names: set[str]) -> ast.Expression:
    """Parse and check a formula once; raises FormulaError naming what is not allowed."""
    if len(source) > MAX_LENGTH:
        raise FormulaError(f"the formula is over {MAX_LENGTH} characters")
    try:
        tree = ast.parse(source, mode="eval")
    except SyntaxError as exc:
        raise FormulaError(f"the formula does not parse: {exc.msg}") from exc
    nodes = list(ast.walk(tree))
    if len(nodes) > MAX_NODES:
        raise FormulaError(f"the formula is over {MAX_NODES} syntax nodes")
    for node in nodes:
        _check(node, names)
    _check_constant_parts(nodes)
    return tree


def _check_constant_parts(nodes: list[ast.AST]) -> None:
    """Evaluate every part that reads no criterion now, so ``9 ** 9 ** 9`` or ``1 / 0``
    is refused with the request, not found wrong item by item."""
    for node in nodes:
        if not isinstance(node, (ast.BinOp, ast.UnaryOp, ast.Call, ast.BoolOp, ast.Compare, ast.IfExp)):
            continue
        try:
            if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Pow):
                exponent = _eval(node.right, {})  # a constant exponent is checked alone
                if abs(exponent) > MAX_EXPONENT:
                    raise FormulaError(f"exponents are limited to {MAX_EXPONENT}")
            _eval(node, {})
        except KeyError:
            continue  # reads a criterion
        except FormulaError:
            raise
        except (ArithmeticError, ValueError, TypeError) as exc:
            raise FormulaError(f"the formula fails: {exc}") from exc


def _check(node: ast.AST, names: set[str]) -> None:
    allowed = (
        ast.Expression,
        ast.BinOp,
        ast.UnaryOp,
        ast.BoolOp,
        ast.Compare,
        ast.IfExp,
        ast.Call,
        ast.Name,
        ast.Constant,
        ast.Load,
        ast.And,
        ast.Or,
        ast.Not,
        ast.USub,
        ast.UAdd,
        *_BINARY,
        *_COMPARE,
    )
    if not isinstance(node, allowed):
        raise FormulaError(f"'{type(node).__name__}' is not allowed in a formula")
    if isinstance(node, ast.Constant) and (isinstance(node.value, bool) or not isinstance(node.value, (int, float))):
        raise FormulaError("only numbers may appear as constants")
    if isinstance(node, ast.Name) and node.id not in names and node.id not in FUNCTIONS:
        raise FormulaError(f"unknown name {node.id!r}; criteria: {', '.join(sorted(names))}")
    if isinstance(node, ast.Call):
        if not isinstance(node.func, ast.Name) or node.func.id not in FUNCTIONS:
            raise FormulaError(f"only these functions: {', '.join(sorted(FUNCTIONS))}")
        if node.keywords or not node.args:
            raise FormulaError("functions take positional arguments only")


def evaluate(tree: ast.Expression, values: dict[str, float]) -> float:
    try:
        result = float(_eval(tree.body, values))
    except (ArithmeticError, ValueError, TypeError) as exc:
        raise FormulaError(f"the formula failed: {exc}") from exc
    if not math.isfinite(result):
        raise FormulaError("the formula gave a non-finite value")
    return result


def _bounded(x: float) -> float:
    if isinstance(x, (int, float)) and abs(x) > MAX_MAGNITUDE:
        raise FormulaError(f"a value in the formula passed {MAX_MAGNITUDE:g}")
    return x


def _eval(node: ast.AST, values: dict[str, float]) -> float:
    if isinstance(node, ast.Constant):
        return _bounded(cast(float, node.value))  # _check let only int and float constants through
    if isinstance(node, ast.Name):
        if node.id in FUNCTIONS:
            raise FormulaError(f"{node.id} is a function")
        return values[node.id]
    if isinstance(node, ast.UnaryOp):
        x = _eval(node.operand, values)
        return float(not x) if isinstance(node.op, ast.Not) else (-x if isinstance(node.op, ast.USub) else x)
    if isinstance(node, ast.BinOp):
        left, right = _eval(node.left, values), _eval(node.right, values)
        if isinstance(node.op, ast.Pow) and (abs(right) > MAX_EXPONENT or abs(left) > MAX_MAGNITUDE):
            raise FormulaError(f"exponents are limited to {MAX_EXPONENT}")
        return _bounded(_BINARY[type(node.op)](left, right))
    if isinstance(node, ast.BoolOp):
        results = [_eval(v, values) for v in node.values]
        truth = all(results) if isinstance(node.op, ast.And) else any(results)
        return float(truth)
    if isinstance(node, ast.Compare):
        left = _eval(node.left, values)
        for op, comparator in zip(node.ops, node.comparators):
            right = _eval(comparator, values)
            if not _COMPARE[type(op)](left, right):
                return 0.0
            left = right
        return 1.0
    if isinstance(node, ast.IfExp):
        return _eval(node.body if _eval(node.test, values) else node.orelse, values)
    if isinstance(node, ast.Call):
        func = cast(ast.Name, node.func)  # _check let only calls of FUNCTIONS by name through
        return _bounded(FUNCTIONS[func.id](*[_eval(a, values) for a in node.args]))
    raise FormulaError(f"'{type(node).__name__}' is not allowed in a formula")
