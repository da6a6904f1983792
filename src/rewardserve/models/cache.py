"""A bounded, thread-safe LRU map: judge results per prompt, scores per token ids."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Hashable
from typing import Any

# Verdicts the host's load decides as much as the program (a test's time, a memory limit
# the host's own memory may end first): a result holding one is never served again.
LOAD_VERDICTS = frozenset({"TLE", "MLE"})


def cacheable(result: Any) -> bool:
    """Whether ``result`` (an item's) may answer the same item again: not where any of its
    tests' verdicts (``tests``, code items) was one the load decided."""
    return not any(getattr(test, "verdict", None) in LOAD_VERDICTS for test in getattr(result, "tests", None) or ())


class LRUCache:
    def __init__(self, max_entries: int):
        self.max_entries = max_entries
        self._data: OrderedDict[Hashable, Any] = OrderedDict()
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    def get(self, key: Hashable) -> Any | None:
        with self._lock:
            if key in self._data:
                self._data.move_to_end(key)
                self.hits += 1
                return self._data[key]
            self.misses += 1
            return None

    def put(self, key: Hashable, value: Any) -> None:
        if self.max_entries <= 0:
            return
        with self._lock:
            self._data[key] = value
            self._data.move_to_end(key)
            while len(self._data) > self.max_entries:
                self._data.popitem(last=False)

    def __len__(self) -> int:
        return len(self._data)

    def clear(self) -> None:
        """Forget every entry (results of weights that no longer serve)."""
        with self._lock:
            self._data.clear()


class TenantCache(LRUCache):
    """One tenant's part of a shared cache: every key is taken with the tenant's name, so
    a tenant never learns from a hit (or its speed) that another sent the same item."""

    def __init__(self, shared: LRUCache, tenant: str | None):  # a view: no storage of its own (no super().__init__)
        self.shared = shared
        self.tenant = tenant
        self.max_entries = shared.max_entries

    def get(self, key: Hashable) -> Any | None:
        return self.shared.get((self.tenant, key))

    def put(self, key: Hashable, value: Any) -> None:
        self.shared.put((self.tenant, key), value)

    def __len__(self) -> int:
        return len(self.shared)
