"""Soak: a bounded steady load at 80% of measured capacity, watching errors, latency and
memory; with ``--hostile``, the same soak again with attacks mixed in.

    .venv/bin/python bench/soak.py [--minutes 10] [--load 0.8] [--hostile [--hostile-share 0.1] [--tenants]]

Serves a small Qwen3 reward model and the math rule in one process (API keys on),
measures capacity with 16 closed-loop callers, warms up for a minute, then sends requests
at ``load`` x capacity on a fixed schedule (open loop: a slow answer does not slow the
sender) for ``--minutes``, and prints requests, errors, p50 / p99 latency and the
server's RSS at start and end (each the mean of a minute of 5-second samples: RSS swings
with the work in flight). ``--hostile`` then runs a second phase of the same length in
which ``--hostile-share`` of the requests are attacks (bench/hostile.py) and reports the
legitimate requests' p99 against the clean phase's, every 5xx, and the RSS trend. With
``--tenants`` the trainer and the attacker are two tenants of equal weight, each its own
key (what a shared fleet does); without, both use the one key. Each block also prints the
share of the CPU the hypervisor took (steal, /proc/stat), and the p99 ratio is given again
over the blocks without steal: on a shared VM a burst of it slows every forward and leaves
a backlog that no attack caused.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from urllib.parse import urlsplit

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")

KEY = "soak-key"
AUTH = {"authorization": f"Bearer {KEY}"}
ATTACKER_KEY = "soak-attacker-key"  # with --tenants: the attacker's own tenant


def rss_mb(pid: int) -> float:
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def request_body(rng: random.Random) -> dict:
    from tests.builders import random_text

    if rng.random() < 0.75:
        items = [
            {"prompt": random_text(rng, rng.randint(5, 30)), "response": random_text(rng, rng.randint(5, 80))}
            for _ in range(4)
        ]
        return {"model": "rm", "items": items}
    k = rng.randint(1, 50)
    items = [{"response": f"\\boxed{{{k}}}", "reference": str(k + rng.randint(0, 1))} for _ in range(2)]
    return {"model": "math", "items": items}


async def closed_loop(url: str, seconds: float, callers: int = 16, windows: int = 4, seed: int = 1) -> float:
    """Requests per second with ``callers`` closed-loop callers: the slowest of
    ``windows`` windows (this VM's speed drifts; an optimistic capacity would make the
    open loop at 80% an overload)."""
    import httpx

    rng, done = random.Random(seed), 0

    async def caller(http, stop):
        nonlocal done
        while time.monotonic() < stop:
            (await http.post(url + "/v1/score", json=request_body(rng))).raise_for_status()
            done += 1

    rates = []
    async with httpx.AsyncClient(timeout=120, headers=AUTH, limits=httpx.Limits(max_connections=callers)) as http:
        for _ in range(windows):
            done, start = 0, time.monotonic()
            stop = start + seconds / windows
            await asyncio.gather(*(caller(http, stop) for _ in range(callers)))
            rates.append(done / (time.monotonic() - start))
    print("capacity windows: " + ", ".join(f"{r:.1f}" for r in rates) + " requests/s", flush=True)
    return min(rates)


class Phase:
    """What one open-loop phase saw."""

    def __init__(self) -> None:
        self.latencies: list[float] = []
        self.by_model: dict[str, list[float]] = {}
        self.errors = 0
        self.sent = 0
        self.hostile: dict[str, dict[int | str, int]] = {}
        self.server_errors = 0  # 5xx, legitimate or hostile
        self.samples: list[tuple[float, float]] = []

    def pct(self, p: float) -> float:
        ordered = sorted(self.latencies)
        return ordered[min(len(ordered) - 1, int(p * len(ordered)))] * 1000

    def merge(self, other: Phase) -> None:
        """Append a later block of the same phase."""
        offset = self.samples[-1][0] + 5 if self.samples else 0.0
        self.latencies += other.latencies
        for model, latencies in other.by_model.items():
            self.by_model.setdefault(model, []).extend(latencies)
        self.errors += other.errors
        self.sent += other.sent
        self.server_errors += other.server_errors
        self.samples += [(t + offset, m) for t, m in other.samples]
        for attack, outcomes in other.hostile.items():
            mine = self.hostile.setdefault(attack, {})
            for outcome, n in outcomes.items():
                mine[outcome] = mine.get(outcome, 0) + n

    def rss_trend(self) -> tuple[float, float, float]:
        first = [m for t, m in self.samples if t < 60]
        last = [m for t, m in self.samples if t >= self.samples[-1][0] - 60]
        return sum(first) / len(first), sum(last) / len(last), max(m for _, m in self.samples)


async def open_loop(url: str, rate: float, seconds: float, pid: int, *, seed: int = 2, record: bool = True) -> Phase:
    """Legitimate requests at ``rate`` per second on a fixed schedule."""
    import httpx

    rng = random.Random(seed)
    phase = Phase()
    next_report = time.monotonic() + 60
    next_sample = time.monotonic()
    tasks = []

    async def legit(http, body):
        start = time.monotonic()
        try:
            response = await http.post(url + "/v1/score", json=body)
            if response.status_code != 200:
                phase.errors += 1
                phase.server_errors += response.status_code >= 500
                print(f"  error: {response.status_code} {response.text[:200]}", flush=True)
        except httpx.HTTPError as exc:
            phase.errors += 1
            print(f"  error: {type(exc).__name__}: {exc}", flush=True)
        phase.latencies.append(time.monotonic() - start)
        phase.by_model.setdefault(body["model"], []).append(time.monotonic() - start)

    async with httpx.AsyncClient(timeout=120, headers=AUTH, limits=httpx.Limits(max_connections=256)) as http:
        begin = time.monotonic()
        while (now := time.monotonic()) - begin < seconds:
            tasks.append(asyncio.ensure_future(legit(http, request_body(rng))))
            phase.sent += 1
            if record and now >= next_sample:
                phase.samples.append((now - begin, rss_mb(pid)))
                next_sample += 5
            if now >= next_report:
                print(
                    f"  {now - begin:5.0f} s: {phase.sent} sent, {phase.errors} errors, "
                    f"{phase.server_errors} 5xx, RSS {rss_mb(pid):.0f} MB",
                    flush=True,
                )
                next_report += 60
                tasks = [t for t in tasks if not t.done()]
            await asyncio.sleep(max(0.0, begin + phase.sent / rate - time.monotonic()))
        await asyncio.gather(*tasks)
    return phase


def attack_menu(only: str, seed: int = 0) -> list:
    from bench.hostile import attacks

    wanted = [w for w in only.split(",") if w]
    return [a for a in attacks(seed) if not wanted or any(w in a.name for w in wanted)]


async def attack_loop(
    url: str, rate: float, seconds: float, seed: int, only: str = "", key: str = KEY, menu: list | None = None
) -> dict:
    """Attacks at ``rate`` per second (bench/hostile.py); what each was answered."""
    import httpx

    from bench.hostile import pick

    rng = random.Random(seed)
    wanted = [w for w in only.split(",") if w]
    menu = menu if menu is not None else attack_menu(only, seed)
    host, port = urlsplit(url).hostname, urlsplit(url).port
    outcomes: dict[str, dict] = {}
    tasks, sent = [], 0

    async def attack(http, chosen):
        if not hasattr(chosen, "path"):
            await chosen(host, port)
            outcome: int | str = "connection held"
        else:
            auth = {"authorization": f"Bearer {key}"}
            headers = {"content-type": "application/json", **(auth if chosen.auth else {})}
            try:
                response = await http.post(
                    url + chosen.path, content=chosen.body, headers=headers, timeout=chosen.client_timeout_s or 120
                )
                outcome = response.status_code
                if response.status_code >= 500:
                    print(f"  5xx on attack {chosen.name}: {response.status_code} {response.text[:200]}", flush=True)
            except httpx.TimeoutException:
                outcome = "hung up"
            except httpx.HTTPError as exc:
                outcome = type(exc).__name__
        counts = outcomes.setdefault(getattr(chosen, "name", "half-open connection"), {})
        counts[outcome] = counts.get(outcome, 0) + 1

    async with httpx.AsyncClient(timeout=120, limits=httpx.Limits(max_connections=64)) as http:
        begin = time.monotonic()
        while time.monotonic() - begin < seconds:
            tasks.append(asyncio.ensure_future(attack(http, pick(rng, menu, not wanted))))
            sent += 1
            await asyncio.sleep(max(0.0, begin + sent / rate - time.monotonic()))
        await asyncio.gather(*tasks)
    return outcomes


def _attacker(url: str, only: str, key: str, commands, results) -> None:
    """The attacks from a process of their own, at the lowest priority: what the
    attacker's own CPU costs (building and uploading 32 MiB bodies) is not the server's,
    and on one machine it must not slow the legitimate client either. Started once,
    before anything is measured, its bodies built then: each hostile block only sends."""
    os.nice(19)
    menu = attack_menu(only)
    results.put("ready")
    while (command := commands.get()) is not None:
        rate, seconds, seed = command
        results.put(asyncio.run(attack_loop(url, rate, seconds, seed, only, key, menu)))


class Attacker:
    def __init__(self, url: str, only: str, key: str):
        import multiprocessing

        context = multiprocessing.get_context("spawn")
        self.commands, self.results = context.Queue(), context.Queue()
        self.process = context.Process(target=_attacker, args=(url, only, key, self.commands, self.results))
        self.process.start()
        assert self.results.get(timeout=600) == "ready"

    def close(self) -> None:
        self.commands.put(None)
        self.process.join(timeout=60)


def hostile_phase(
    url: str, rate: float, seconds: float, pid: int, share: float, attacker: Attacker, seed: int = 3
) -> Phase:
    attacker.commands.put((share * rate, seconds, seed))
    phase = asyncio.run(open_loop(url, (1 - share) * rate, seconds, pid, seed=seed))
    phase.hostile = attacker.results.get(timeout=600)
    phase.server_errors += sum(
        n for counts in phase.hostile.values() for code, n in counts.items() if isinstance(code, int) and code >= 500
    )
    return phase


def report(name: str, phase: Phase) -> None:
    start, end, peak = phase.rss_trend()
    legit = len(phase.latencies)
    print(
        f"[{name}] requests {phase.sent} ({legit} legitimate), legitimate errors {phase.errors}, "
        f"5xx {phase.server_errors} (target 0)"
    )
    print(f"[{name}] legitimate latency p50 {phase.pct(0.50):.1f} ms, p99 {phase.pct(0.99):.1f} ms")
    for model, latencies in sorted(phase.by_model.items()):
        ordered = sorted(latencies)
        print(
            f"[{name}]   {model}: p50 {ordered[len(ordered) // 2] * 1000:.1f} ms, "
            f"p99 {ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))] * 1000:.1f} ms"
        )
    print(
        f"[{name}] server RSS (mean of the first / last minute) {start:.0f} MB -> {end:.0f} MB: "
        f"{(end / start - 1) * 100:+.1f}% (target < 5%); peak {peak:.0f} MB"
    )
    for attack, outcomes in sorted(phase.hostile.items()):
        print(f"[{name}]   attack {attack}: {dict(outcomes)}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--minutes", type=float, default=10.0, help="of load (with --hostile: of each kind)")
    parser.add_argument("--load", type=float, default=0.8)
    parser.add_argument(
        "--hostile", action="store_true", help="alternate clean minutes with ones with attacks mixed in"
    )
    parser.add_argument("--hostile-share", type=float, default=0.1)
    parser.add_argument("--attacks", default="", help="only attacks whose names hold one of these (comma-separated)")
    parser.add_argument("--tenants", action="store_true", help="the attacker as a tenant of its own")
    parser.add_argument(
        "--server-log",
        type=Path,
        help="keep the service's request log here (JSON lines: each request's queue and inference ms)",
    )
    args = parser.parse_args()

    from tests.builders import build_sequence_classifier
    from tests.harness import free_port, wait_ready

    print(f"CPU: {platform.processor() or platform.machine()} ({os.cpu_count()} cores), {_cpu_model()}", flush=True)
    from rewardserve.service.settings import Settings

    print(f"rule workers' priority: {Settings().rule_priority}", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        model = build_sequence_classifier(Path(tmp) / "rm", "qwen3", hidden=256, layers=4, heads=4, head_dim=64)
        port = free_port()
        env = {**os.environ, "REWARDSERVE_LOG_LEVEL": "warning", "REWARDSERVE_API_KEYS": KEY}
        attacker_key = KEY
        if args.tenants:
            tenants = Path(tmp) / "tenants.yaml"
            tenants.write_text(
                f"tenants:\n  - {{name: trainer, keys: [{KEY}]}}\n  - {{name: attacker, keys: [{ATTACKER_KEY}]}}\n"
            )
            env = {k: v for k, v in env.items() if k != "REWARDSERVE_API_KEYS"}  # the tenants' keys only
            env["REWARDSERVE_TENANTS_FILE"] = str(tenants)
            attacker_key = ATTACKER_KEY
        if args.server_log is not None:  # where a stall sat: queue or forward, which model, which tenant
            env |= {"REWARDSERVE_LOG_LEVEL": "info", "REWARDSERVE_LOG_FORMAT": "json"}
        log = open(args.server_log, "wb") if args.server_log is not None else subprocess.DEVNULL
        proc = subprocess.Popen(
            [sys.executable, "-m", "rewardserve.cli", "serve", "--port", str(port), "--model", f"rm={model}"],
            env=env,
            stdout=log,
            stderr=log,
        )
        url = f"http://127.0.0.1:{port}"
        try:
            wait_ready(url, proc, 120)
            capacity = asyncio.run(closed_loop(url, 60))
            rate = args.load * capacity
            print(
                f"capacity {capacity:.1f} requests/s; warming up 1 min, then {rate:.1f}/s for {args.minutes:g} min",
                flush=True,
            )
            asyncio.run(open_loop(url, rate, 60, proc.pid, record=False))  # every shape seen once, caches filled
            if not args.hostile:
                report("clean", asyncio.run(open_loop(url, rate, args.minutes * 60, proc.pid)))
                return
            # Clean and hostile minutes alternate, so the machine's drift (this VM's speed
            # moves by tens of percent over minutes) weighs on both alike.
            print(
                f"alternating clean and hostile minutes ({args.hostile_share:.0%} of the hostile ones' "
                f"requests are attacks{', from a tenant of its own' if args.tenants else ''}), "
                f"{args.minutes:g} min of each",
                flush=True,
            )
            clean, hostile = Phase(), Phase()
            quiet_clean, quiet_hostile, quiet = Phase(), Phase(), 0
            before = 0.0  # steal in the minute before a block: its backlog drains into the block
            blocks = max(1, round(args.minutes))
            attacker = Attacker(url, args.attacks, attacker_key)
            for block in range(blocks):
                seconds = args.minutes * 60 / blocks
                start = cpu_ticks()
                clean_block = asyncio.run(open_loop(url, rate, seconds, proc.pid, seed=10 + block))
                middle = cpu_ticks()
                hostile_block = hostile_phase(
                    url, rate, seconds, proc.pid, args.hostile_share, attacker, seed=100 + block
                )
                steal = (stolen(start, middle), stolen(middle, cpu_ticks()))
                clean.merge(clean_block)
                hostile.merge(hostile_block)
                if max(before, *steal) < QUIET_STEAL:
                    quiet_clean.merge(clean_block)
                    quiet_hostile.merge(hostile_block)
                    quiet += 1
                print(
                    f"  block {block + 1}/{blocks}: legitimate p99 clean {clean_block.pct(0.99):.0f} ms, "
                    f"hostile {hostile_block.pct(0.99):.0f} ms; CPU taken by the hypervisor (steal) "
                    f"{steal[0]:.1%}, {steal[1]:.1%}",
                    flush=True,
                )
                before = steal[1]
            attacker.close()
            report("clean", clean)
            report("hostile", hostile)
            print(f"legitimate p99 hostile / clean: {hostile.pct(0.99) / clean.pct(0.99):.2f} (target <= 1.5)")
            if quiet:
                print(
                    f"over the {quiet} of {blocks} blocks whose two minutes, and the minute before, had under "
                    f"{QUIET_STEAL:.0%} steal: "
                    f"p99 clean {quiet_clean.pct(0.99):.0f} ms, hostile {quiet_hostile.pct(0.99):.0f} ms, "
                    f"hostile / clean {quiet_hostile.pct(0.99) / quiet_clean.pct(0.99):.2f}"
                )
        finally:
            proc.terminate()
            proc.wait(timeout=60)


# A block counts as quiet where the hypervisor took less than this share of the machine's
# CPU in each of its minutes: on a shared VM, bursts of steal (tens of percent for tens of
# seconds) slow every forward and build a queue that no attack caused.
QUIET_STEAL = 0.02


def cpu_ticks() -> tuple[int, int]:
    """The machine's (steal, all) CPU time so far, in ticks (/proc/stat's first line)."""
    try:
        with open("/proc/stat") as f:
            fields = [int(x) for x in f.readline().split()[1:9]]
    except (OSError, ValueError):
        return 0, 0
    return (fields[7] if len(fields) == 8 else 0), sum(fields)


def stolen(start: tuple[int, int], end: tuple[int, int]) -> float:
    """The share of the CPU time between two ``cpu_ticks`` that the hypervisor took."""
    total = end[1] - start[1]
    return (end[0] - start[0]) / total if total > 0 else 0.0


def _cpu_model() -> str:
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown CPU"


if __name__ == "__main__":
    main()
