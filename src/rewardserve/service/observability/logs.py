"""One log format for the whole process: ours, uvicorn's and the libraries', as text
lines or as JSON objects (``--log-format json``), with repeated warnings rate-limited."""

from __future__ import annotations

import json
import logging
import re
import time

TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
# C0 and C1 control characters: in a message they could end the line and forge another,
# or drive the terminal reading the log.
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


class TextFormatter(logging.Formatter):
    """``TEXT_FORMAT``, every message one line: control characters written as escapes
    (a traceback, which is ours, keeps its lines)."""

    def __init__(self) -> None:
        super().__init__(TEXT_FORMAT)

    def formatMessage(self, record: logging.LogRecord) -> str:  # noqa: N802 (logging's name)
        record.message = _CONTROL.sub(lambda m: m.group().encode("unicode_escape").decode("ascii"), record.message)
        return super().formatMessage(record)


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, message, and the fields a record
    carries in ``extra={"fields": {...}}`` (the request log's)."""

    def format(self, record: logging.LogRecord) -> str:
        out = {
            "time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        out.update(getattr(record, "fields", None) or {})
        if record.exc_info:
            out["exception"] = self.formatException(record.exc_info)
        return json.dumps(out, default=str)


class RateLimitedLogs(logging.Filter):
    """Warnings and errors: one record per (logger, message template) per ``interval``
    seconds; the next one let through says how many were held back. Lower levels (the
    request log among them) pass untouched."""

    def __init__(self, interval: float = 10.0):
        super().__init__()
        self.interval = interval
        self._seen: dict[tuple[str, str, object], list[float]] = {}  # key -> [last shown, held back]

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno < logging.WARNING:
            return True
        key = (record.name, str(record.msg), record.exc_info[0] if record.exc_info else None)
        now = time.monotonic()
        seen = self._seen.get(key)
        if seen is not None and now - seen[0] < self.interval:
            seen[1] += 1
            return False
        held = int(seen[1]) if seen is not None else 0
        last = seen[0] if seen is not None else now
        self._seen[key] = [now, 0]
        if len(self._seen) > 10_000:
            self._seen = {key: self._seen[key]}
        if held:
            record.msg = f"{record.getMessage()} (and {held} more like it in the last {now - last:.0f}s)"
            record.args = ()
        return True


def configure_logging(level: str, fmt: str = "text", rate_limit_s: float = 10.0) -> None:
    """One handler on the root logger; uvicorn's and the libraries' loggers hand their
    records to it instead of printing on their own (which printed some lines twice)."""
    handler = logging.StreamHandler()
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    handler.addFilter(RateLimitedLogs(rate_limit_s))
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level.upper())
    for name in ("uvicorn", "uvicorn.error", "uvicorn.access", "transformers", "huggingface_hub"):
        logger = logging.getLogger(name)
        logger.handlers.clear()
        logger.propagate = True
    logging.captureWarnings(True)
    try:  # transformers keeps a handler of its own and does not propagate by default
        from transformers.utils import logging as transformers_logging
    except ImportError:
        return
    transformers_logging.disable_default_handler()
    transformers_logging.enable_propagation()
    transformers_logging.disable_progress_bar()  # bars on stderr, outside any format
