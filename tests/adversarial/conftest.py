"""Attacks against a real service process, each watched from outside.

One server process serves the attacked models: a small reward model (``rm``, the
bystander every probe scores), a VLM and a CLIP goal model (image attacks), a small
judge (``judge``), a JSON-schema rule model whose reference is the schema (``schema``),
and the built-in rules (``math`` shadowed by ``exact_match``). Two tenants share it,
``a`` (the attacker, KEY_A) and ``b`` (the bystander, KEY_B); KEY is the operator's
(a key of no tenant). While an attack runs, ``Watch`` sends a fresh one-item request to
``rm`` every 50 ms (fresh text, so no cache answers) and samples the server's RSS: every
test asserts the probes' p99 stays under PROBE_P99_S and the RSS under RSS_BOUND_MB
above where it started, and that the service answers normally afterwards.
"""

from __future__ import annotations

import json
import signal
import statistics
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from tests.harness import serve_process

KEY = "adversary-has-a-key"
AUTH = {"authorization": f"Bearer {KEY}"}
KEY_A, KEY_B = "key-of-tenant-a", "key-of-tenant-b"
AS_A = {"authorization": f"Bearer {KEY_A}"}
AS_B = {"authorization": f"Bearer {KEY_B}"}
BODY_TIMEOUT_S = 3.0
REQUESTS_PER_TENANT = 40
RULE_QUEUE_MAX = 3000
PROBE_P99_S = 1.0
NOISE_S = 0.025  # least slack on the 2x-of-alone median
RSS_BOUND_MB = 600  # above the server's RSS before the attack


def rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


@dataclass
class Attacked:
    url: str
    pid: int
    log: Path

    def post(self, path: str, body: dict | None = None, timeout: float = 60, **kw) -> httpx.Response:
        headers = {**AUTH, **kw.pop("headers", {})}
        return httpx.post(self.url + path, json=body, headers=headers, timeout=timeout, **kw)

    def healthy(self) -> None:
        """Alive, and a normal request is scored."""
        assert httpx.get(self.url + "/health", timeout=5).status_code == 200
        response = self.post("/v1/score", {"model": "math", "items": [{"response": r"\boxed{2}", "reference": "2"}]})
        assert response.status_code == 200 and response.json()["results"][0]["score"] == 1.0

    def watch(self, **kw) -> Watch:
        return Watch(self, **kw)

    def metrics(self, headers: dict[str, str] | None = None) -> str:
        return httpx.get(self.url + "/metrics", headers=AUTH if headers is None else headers, timeout=10).text


PROBER = """
import json, signal, sys, time, uuid
import httpx

url, key, every_s, alone = sys.argv[1], sys.argv[2], float(sys.argv[3]), int(sys.argv[4])
stop = False
def _stop(*_):
    global stop
    stop = True
signal.signal(signal.SIGTERM, _stop)
tag = uuid.uuid4().hex
with httpx.Client(base_url=url, headers={"authorization": "Bearer " + key}, timeout=30) as http:
    n = 0
    while not stop:
        n += 1
        start = time.monotonic()
        try:
            r = http.post("/v1/score", json={"model": "rm", "items": [{"response": f"probe {tag} {n}"}]})
            failure = None if r.status_code == 200 else f"{r.status_code} {r.text[:200]}"
        except httpx.HTTPError as exc:
            failure = f"{type(exc).__name__}: {exc}"
        print(json.dumps({"alone": n <= alone, "s": time.monotonic() - start, "failure": failure}), flush=True)
        if n == alone:
            print("READY", flush=True)
        # Alone and beside probes paced alike: a forward after a pause (its threads gone
        # to sleep) costs more than one straight after another on a busy machine.
        time.sleep(every_s)
"""


class Watch:
    """Probes ``rm`` (as ``headers``' key: the operator's by default) from a process of
    its own, so the attacker's threads in this one cannot slow the probes, and samples
    RSS while the ``with`` block runs the attack. With ``against_alone`` (an attack by one
    tenant, probed as another), the probes' median must also stay within twice what it
    was just before the attack (issue 37: the other tenant's latency within 2x of alone)."""

    ALONE_PROBES = 12  # the first two warm the connection
    MIN_BESIDE_PROBES = 12

    def __init__(
        self,
        target: Attacked,
        every_s: float = 0.05,
        headers: dict[str, str] | None = None,
        against_alone: bool = False,
    ):
        self.target = target
        self.every_s = every_s
        self.key = (headers or AUTH)["authorization"].removeprefix("Bearer ")
        self.against_alone = against_alone
        self.alone: list[float] = []
        self.latencies: list[float] = []
        self.failures: list[str] = []
        self.rss_start = rss_mb(target.pid)
        self.rss_peak = self.rss_start
        self._stop = threading.Event()
        self._sampler = threading.Thread(target=self._sample, daemon=True)
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._prober: subprocess.Popen[str] | None = None

    def __enter__(self) -> Watch:
        alone = self.ALONE_PROBES if self.against_alone else 0
        self._prober = subprocess.Popen(
            [sys.executable, "-c", PROBER, self.target.url, self.key, str(self.every_s), str(alone)],
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self._prober.stdout is not None
        deadline = time.monotonic() + 60
        for line in self._prober.stdout:
            if line.startswith("READY"):
                break
            self._keep(line)
            if not self.against_alone:
                break
            assert time.monotonic() < deadline, "the probes alone took over 60 s"
        self._reader.start()
        self._sampler.start()
        time.sleep(0.2)  # a few probes before the attack starts
        return self

    def __exit__(self, *exc) -> None:
        time.sleep(0.2)
        if self.against_alone and exc[0] is None:
            # A median needs its samples: an attack refused in a few tens of milliseconds
            # overlaps one or two probes, and over four probes those two are the median.
            # The window is held open until it has MIN_BESIDE_PROBES; an attack that
            # really stalls the service lasts long enough to fill the window itself.
            deadline = time.monotonic() + 30
            while len(self.latencies) < self.MIN_BESIDE_PROBES and time.monotonic() < deadline:
                time.sleep(self.every_s)
        self._stop.set()
        self._sampler.join(timeout=30)
        assert self._prober is not None
        self._prober.send_signal(signal.SIGTERM)
        self._prober.wait(timeout=60)
        self._reader.join(timeout=30)
        if exc[0] is None:
            self.check()

    def _read(self) -> None:
        assert self._prober is not None and self._prober.stdout is not None
        for line in self._prober.stdout:
            self._keep(line)

    def _keep(self, line: str) -> None:
        if not line.startswith("{"):
            return
        probe = json.loads(line)
        if probe["failure"]:
            self.failures.append(probe["failure"])
        (self.alone if probe["alone"] else self.latencies).append(probe["s"])

    def _sample(self) -> None:
        while not self._stop.is_set():
            self.rss_peak = max(self.rss_peak, rss_mb(self.target.pid))
            self._stop.wait(self.every_s)

    @property
    def alone_p50(self) -> float | None:
        return statistics.median(self.alone[2:]) if len(self.alone) > 2 else None

    @property
    def p99(self) -> float:
        ordered = sorted(self.latencies)
        return ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))]

    def check(self) -> None:
        assert not self.failures, self.failures[:3]
        assert len(self.latencies) >= 3
        assert self.p99 < PROBE_P99_S, f"probe p99 {self.p99:.2f}s over {len(self.latencies)} probes"
        if self.alone_p50 is not None:
            beside = statistics.median(self.latencies)
            # Twice alone, plus the machine's own noise: the probes are 15-20 ms forwards on
            # two shared cores, where a scheduler quantum or two moves between runs, and on
            # a loaded machine alone probes swing between one quantum and several. The
            # slack is the larger of a fixed floor and the alone probes' interquartile range.
            q1, _, q3 = statistics.quantiles(self.alone[2:], n=4)
            slack = max(NOISE_S, q3 - q1)
            assert beside <= 2 * self.alone_p50 + slack, (
                f"probe median {beside:.3f}s beside the attack, {self.alone_p50:.3f}s alone "
                f"(slack {slack:.3f}s); beside {[round(s, 3) for s in self.latencies]}, "
                f"alone {[round(s, 3) for s in self.alone]}"
            )
        grown = self.rss_peak - self.rss_start
        assert grown < RSS_BOUND_MB, f"server RSS grew {grown:.0f} MB during the attack"
        self.target.healthy()


@pytest.fixture(scope="package")  # stopped once tests/adversarial is done
def attacked(tmp_path_factory, qwen3_rm, vl_value, clip_model, judge_lm) -> Attacked:
    tmp = tmp_path_factory.mktemp("attacked")
    config = tmp / "models.yaml"
    config.write_text(
        "models:\n"
        f"  - {{name: rm, source: {qwen3_rm}, max_wait_ms: 2}}\n"
        f"  - {{name: vl, kind: vlm, source: {vl_value}}}\n"
        f"  - {{name: clip, kind: clip_goal, source: {clip_model}, options: {{goal: a red square}}}}\n"
        f"  - {{name: judge, kind: verifier, source: {judge_lm}}}\n"
        "  - {name: schema, kind: rule, source: json_schema}\n"
        "  - {name: math, kind: rule, source: math_equiv, shadow: {model: exact_match, fraction: 1.0}}\n"
        "tenants:\n"
        f"  - {{name: a, keys: [{KEY_A}]}}\n"
        f"  - {{name: b, keys: [{KEY_B}]}}\n"
    )
    env = {
        "REWARDSERVE_API_KEYS": KEY,
        "REWARDSERVE_RULE_TIMEOUT_S": "2",
        "REWARDSERVE_RULE_MEMORY_MB": "256",
        "REWARDSERVE_RULE_QUEUE_MAX": str(RULE_QUEUE_MAX),
        "REWARDSERVE_MAX_CONNECTIONS": "200",
        "REWARDSERVE_HEADER_TIMEOUT_S": "2",
        "REWARDSERVE_BODY_TIMEOUT_S": str(BODY_TIMEOUT_S),
        "REWARDSERVE_MAX_REQUESTS_PER_TENANT": str(REQUESTS_PER_TENANT),
        "REWARDSERVE_PUBLIC_MODEL_NAMES": "false",
        "REWARDSERVE_LOG_LEVEL": "warning",
    }
    log = tmp / "server.log"
    with serve_process("--config", str(config), env=env, log_path=log) as (url, proc):
        yield Attacked(url, proc.pid, log)
