"""Code rewards, in one run: rewardserve's ``code`` model (every test in its bubblewrap
sandbox) against verl 0.9.1's ``prime_code`` ``compute_score`` run serially in one process
(a completion's tests in one forked child, no sandbox), on the same completions.

    .venv/bin/python bench/code.py [--completions 64] [--rounds 2] [--rss-runs 2000] [--seed N]
    .venv/bin/python bench/code.py --languages [--completions 16]

``--languages``: completions/s per language (Python, C++, Java, JavaScript, Go, Rust; 1-test and
10-test; each program compiled, or its build kept from before), the CPU beside them.

Completions: a+b programs over fresh numbers (a new seed each run, so no cache answers),
three in four right, one in four wrong; problems of 1 test and of 10. rewardserve is
served over HTTP (``rewardserve serve``, the built-in ``code`` model) and sent one
completion per request by as many callers as cores; prime_code scores the same
completions one after the other. The order is A B B A per round (ABBA), and each system's
completions/s is its mean over its runs. Per core: rewardserve's rate over the cores,
prime_code's as it is (one process, one core at a time).

Also: the sandbox's own cost per test (a sandbox's wall time less its tests' own, over
its tests: p50), the service's RSS before and after ``--rss-runs`` completions (on a code
model without the score cache, whose 20,000 results fresh completions would fill), and a
GRPO-shaped burst (64 completions x 10 tests in one request).
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import os
import random
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.compare import cpu_name, fresh_seed  # noqa: E402
from bench.soak import rss_mb  # noqa: E402

RIGHT = "```python\na, b = map(int, input().split())\nprint(a + b)\n```"
WRONG = "```python\na, b = map(int, input().split())\nprint(a - b)\n```"


def problems(rng: random.Random, count: int, tests: int) -> list[tuple[str, dict]]:
    out = []
    for k in range(count):
        pairs = [(rng.randint(-(10**9), 10**9), rng.randint(-(10**9), 10**9)) for _ in range(tests)]
        reference = {"inputs": [f"{a} {b}\n" for a, b in pairs], "outputs": [f"{a + b}\n" for a, b in pairs]}
        # Fresh text per completion: a comment with the seed's numbers, so no cache answers.
        completion = (WRONG if k % 4 == 3 else RIGHT).replace("```python\n", f"```python\n# {rng.random()}\n")
        out.append((completion, reference))
    return out


def prime_code():
    """verl 0.9.1's prime_code package, loaded from its files (``import verl`` needs ray)."""
    spec = importlib.util.find_spec("verl")
    if spec is None or spec.origin is None:
        raise SystemExit("verl==0.9.1 is not installed: make install-dev (it installs it --no-deps)")
    folder = Path(spec.origin).parent / "utils" / "reward_score" / "prime_code"
    package = importlib.util.spec_from_file_location(
        "prime_code", folder / "__init__.py", submodule_search_locations=[str(folder)]
    )
    assert package is not None and package.loader is not None
    module = importlib.util.module_from_spec(package)
    sys.modules["prime_code"] = module
    package.loader.exec_module(module)
    return module


def run_prime(module, work: list[tuple[str, dict]]) -> tuple[float, list[float]]:
    start = time.perf_counter()
    scores = []
    for completion, reference in work:
        passed, _ = module.compute_score(completion, reference, continuous=True)
        scores.append(float(passed))
    return len(work) / (time.perf_counter() - start), scores


async def run_ours(
    url: str, work: list[tuple[str, dict]], callers: int, model: str = "code"
) -> tuple[float, list[float]]:
    import httpx

    queue: asyncio.Queue[int] = asyncio.Queue()
    for index in range(len(work)):
        queue.put_nowait(index)
    scores: list[float] = [0.0] * len(work)

    async def caller(http: httpx.AsyncClient) -> None:
        while not queue.empty():
            index = queue.get_nowait()
            completion, reference = work[index]
            body = {"model": model, "items": [{"response": completion, "reference": reference}]}
            result = (await http.post(url + "/v1/score", json=body)).json()["results"][0]
            assert result["valid"], result
            scores[index] = result["score"]

    start = time.perf_counter()
    async with httpx.AsyncClient(timeout=300) as http:
        await asyncio.gather(*(caller(http) for _ in range(callers)))
    return len(work) / (time.perf_counter() - start), scores


def sandbox_overhead(rng: random.Random, runs: int) -> float:
    """p50 over ``runs`` sandboxes of 10 trivial tests: (wall - the tests' own) / 10, ms."""
    from rewardserve.models.rules.code import sandbox

    code = "a, b = map(int, input().split())\nprint(a + b)\n"
    costs = []
    for _ in range(runs):
        tests = [{"stdin": f"{rng.randint(0, 99)} {rng.randint(0, 99)}\n"} for _ in range(10)]
        start = time.perf_counter()
        outcome = sandbox.run(code, tests, sandbox.Limits())
        wall = time.perf_counter() - start
        costs.append((wall - sum(r["time_s"] for r in outcome.results)) / len(tests) * 1000)
    return statistics.median(costs)


# Each language's a+b program (its right answer): the per-language figures' completions.
ADD_PROGRAMS = {
    "python": "a, b = map(int, input().split())\nprint(a + b)\n",
    "cpp": '#include <cstdio>\nint main() { long long a, b; std::scanf("%lld %lld", &a, &b);'
    ' std::printf("%lld\\n", a + b); }\n',
    "java": "import java.io.*;\nimport java.util.*;\npublic class Main { public static void main(String[] x)"
    " throws IOException { StringTokenizer t = new StringTokenizer(new BufferedReader("
    "new InputStreamReader(System.in)).readLine());"
    " System.out.println(Long.parseLong(t.nextToken()) + Long.parseLong(t.nextToken())); } }\n",
    "javascript": "const [a, b] = require('fs').readFileSync(0, 'utf8').trim().split(/\\s+/).map(BigInt);"
    " console.log((a + b).toString());\n",
    "go": 'package main\nimport "fmt"\nfunc main() { var a, b int64; fmt.Scan(&a, &b); fmt.Println(a + b) }\n',
    "rust": "use std::io::Read;\nfn main() { let mut s = String::new();"
    " std::io::stdin().read_to_string(&mut s).unwrap();"
    ' let v: Vec<i64> = s.split_whitespace().map(|x| x.parse().unwrap()).collect(); println!("{}", v[0] + v[1]); }\n',
}
COMMENT = {"python": "#", "cpp": "//", "java": "//", "javascript": "//", "go": "//", "rust": "//"}


def languages(rng: random.Random, completions: int) -> None:
    """Completions/s per language, one after another in this process (one sandbox, one
    core): 1-test and 10-test problems, each program new (a comment makes its source, so
    its build, new: compiled every time) or the same program again (its build kept)."""
    from rewardserve.models.rules.code import code_tests

    for language, program in ADD_PROGRAMS.items():
        row = []
        for tests in (1, 10):
            for fresh in (True, False):
                work = problems(rng, completions, tests)
                same = f"{COMMENT[language]} {rng.random()}\n{program}"
                code_tests(same, work[0][1], language=language, extract=False)  # warm: the sandbox, the build
                start = time.perf_counter()
                for _, reference in work:
                    code = f"{COMMENT[language]} {rng.random()}\n{program}" if fresh else same
                    score = code_tests(code, reference, language=language, extract=False)
                    assert float(score) == 1.0, (language, score.reason)
                rate = len(work) / (time.perf_counter() - start)
                row.append(f"{tests:>2}-test {'compiled' if fresh else 'cached  '} {rate:7.1f}")
        print(f"{language:<10} " + "  ".join(row), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument(
        "--languages", action="store_true", help="only completions/s per language (compiled each time, and cached)"
    )
    parser.add_argument("--completions", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--rss-runs", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=None)
    args = parser.parse_args()
    seed = fresh_seed(args.seed)
    rng = random.Random(seed)
    cores = os.cpu_count() or 1
    if args.languages:
        load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
        print(f"CPU: {cpu_name()}, {cores} cores, load {load}; seed {seed}; {args.completions} completions a figure")
        languages(rng, args.completions)
        return
    module = prime_code()
    from tests.harness import serve_process

    print(f"CPU: {cpu_name()}, {cores} cores; seed {seed}")
    # The RSS check's model: the code model without its score cache (20,000 results by
    # default, which fresh completions fill: bounded growth, but not the service's own).
    uncached = [{"name": "code_uncached", "kind": "rule", "source": "code_tests"}]
    uncached[0]["options"] = {"timeout_s": 300, "score_cache_size": 0}
    env = {"REWARDSERVE_LOG_LEVEL": "warning", "REWARDSERVE_MODELS": json.dumps(uncached)}
    with serve_process(env=env) as (url, proc):
        asyncio.run(run_ours(url, problems(rng, 8, 10), cores))  # warm: the pool's workers up
        for tests in (1, 10):
            ours, theirs = [], []
            for _ in range(args.rounds):
                for system in ("ours", "prime", "prime", "ours"):
                    work = problems(rng, args.completions, tests)
                    if system == "ours":
                        rate, got = asyncio.run(run_ours(url, work, cores))
                        ours.append(rate)
                    else:
                        rate, got = run_prime(module, work)
                        theirs.append(rate)
                    want = [0.0 if "a - b" in c else 1.0 for c, _ in work]
                    assert got == want, (system, got, want)
            a, b = statistics.mean(ours), statistics.mean(theirs)
            print(
                f"{tests:>2}-test completions/s: rewardserve {a:.1f} ({a / cores:.1f} per core), "
                f"prime_code {b:.1f} (one process); per core {a / cores / b:.2f}x"
            )
        print(f"sandbox overhead per test, p50 over 50 sandboxes of 10 tests: {sandbox_overhead(rng, 50):.2f} ms")
        before = rss_mb(proc.pid)
        done = 0
        while done < args.rss_runs:
            asyncio.run(run_ours(url, problems(rng, 200, 1), cores, model="code_uncached"))
            done += 200
        print(
            f"service RSS {before:.0f} MiB before {done} completions (score cache off), "
            f"{rss_mb(proc.pid):.0f} MiB after"
        )
        work = problems(rng, 64, 10)
        body = {"model": "code", "items": [{"response": c, "reference": r} for c, r in work]}
        import httpx

        start = time.perf_counter()
        results = httpx.post(url + "/v1/score", json=body, timeout=600).json()["results"]
        took = time.perf_counter() - start
        assert all(r["valid"] for r in results)
        print(f"GRPO burst, 64 completions x 10 tests in one request: {took:.2f} s ({64 / took:.1f} completions/s)")
    print(json.dumps({"cpu": cpu_name(), "seed": seed}))


if __name__ == "__main__":
    main()
