"""Reading the operator's YAML files (models, tenants, judge templates) under limits.

A config is read once, but what it holds is used on every request: a 435-byte alias
bomb (``a: &a [*b, *b, ...]`` nine levels deep) expands to gigabytes when a rule's
arguments are copied or printed. So aliases are refused, nesting is bounded, and a file
that breaks a limit or does not parse is one ``ValueError`` naming the file and line.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

MAX_DEPTH = 64
MAX_FILE_BYTES = 16 * 1024 * 1024


class _BoundedLoader(yaml.SafeLoader):  # type: ignore[misc]  # (yaml is untyped here)
    """YAML's safe loader without aliases and with bounded nesting."""

    _depth = 0

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()
            raise yaml.composer.ComposerError(
                None, None, f"an alias (*{event.anchor}) is not allowed here: write the value out", event.start_mark
            )
        self._depth += 1
        try:
            if self._depth > MAX_DEPTH:
                raise yaml.composer.ComposerError(
                    None, None, f"nested deeper than {MAX_DEPTH} levels", self.peek_event().start_mark
                )
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1


def load_yaml(path: Path | str) -> Any:
    """The file's YAML value; ValueError naming the file (and line) for anything wrong."""
    path = Path(path)
    try:
        if path.is_dir():
            raise ValueError(f"{path}: is a directory, not a YAML file")
        size = path.stat().st_size
        if size > MAX_FILE_BYTES:
            raise ValueError(f"{path}: {size} bytes, over the limit of {MAX_FILE_BYTES} for a config file")
        with open(path, encoding="utf-8") as f:
            return yaml.load(f, Loader=_BoundedLoader)  # noqa: S506 (a SafeLoader)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark is not None else ""
        raise ValueError(f"{path}: {exc.problem or exc.context or 'not valid YAML'}{where}") from None
    except yaml.YAMLError as exc:
        raise ValueError(f"{path}: not valid YAML: {str(exc).splitlines()[0] if str(exc) else exc}") from None
    except UnicodeDecodeError as exc:
        raise ValueError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    except OSError as exc:
        raise ValueError(f"{path}: {exc.strerror or exc}") from None
