"""One run, one model, the same items: rewardserve against its peers.

    .venv/bin/python bench/compare.py [--callers 8] [--vllm-python .venv-vllm/bin/python]
                                      [--only grpo,pairs,prm,rubric,burst,stream] [--rounds 2]
                                      [--dtype float32|bfloat16] [--systems abcd] [--b-block-size N]

Model: a Qwen3 sequence classifier (hidden 1024, 8 layers, head_dim 128, random weights,
a step tag in its vocabulary) saved once; every system loads those files.

Systems, one after the other (nothing else runs meanwhile), the whole sequence repeated
``--rounds`` times with each system's best run of a workload kept (this machine's speed
drifts between minutes; a single pass favoured whichever system ran in a fast minute):
  (a) rewardserve, transformers backend, over HTTP (`rewardserve serve`);
  (b) rewardserve, vLLM backend, over HTTP (the same CLI run from the vLLM virtualenv);
  (c) vLLM's own OpenAI server, --runner pooling, prefix caching on: /classify for
      sequence scores, /pooling (token_classify at the step tags) for PRM steps;
  (d) a naive server (bench/naive_server.py): FastAPI + transformers, one padded forward
      per request, no batching across requests (OpenRLHF serve_rm's shape);
  (e) raw in-process forward of the same token ids, no sharing, padded batches of 8
      sorted by length, with the oneDNN linears rewardserve uses in fp32 (torch's in bf16,
      faster for its shapes): the compute bound for unshared work.
Every system runs ``--dtype`` (float32 by default).
Workloads (fresh texts, so no cache of any system has seen them; each system first
scores a small warm-up set of other texts):
  grpo    8 prompts x 8 completions, prompt ~300 tokens, completions 40-100; one
          request per group;
  pairs   64 independent prompt/response pairs (60-160 + 40-100 tokens); 4 per request;
  prm     32 trajectories of 8 steps, the classifier read at a tag after every step
          (process kind, format classifier_tags); 2 per request;
  rubric  16 responses x 4 criteria, each criterion a follow-up user turn after the same
          prompt and response, scored by the classifier; one request per response.
  burst   a GRPO step's rewards at once: 32 groups x 8 as grpo, 20% of the completions
          exact repeats of another in their group (a converging policy repeats itself);
          measured from the first request to the last reward;
  stream  the same shape (fresh texts), the 32 groups sent at a steady rate over
          --stream-seconds (20: one every 0.625 s), as a rollout finishes them, each at its
          time whatever is pending; measured from the last group sent to its reward.
The callers (8) send requests from a shared queue (stream: one sender per group). (c), (d), (e) get the token ids
rewardserve itself built; every system's scores are checked against (e).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import random
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")

TAG = "<extra_0>"
CRITERIA = [
    "Is the answer correct?",
    "Is the reasoning complete?",
    "Is it concise?",
    "Does it follow the requested format?",
]


@dataclass
class Workload:
    name: str
    route: str  # rewardserve's
    model: str  # rewardserve's model name
    requests: list[list[dict]]  # items per request
    seqs: list[list[tuple[list[int], list[int]]]] | None = None  # (ids, positions) per item
    every: float = 0.0  # > 0: request k is sent at k * every seconds (open loop), timed from the last

    @property
    def items(self) -> int:
        return sum(len(r) for r in self.requests)

    @property
    def tokens(self) -> int:
        return sum(len(ids) for r in self.seqs for ids, _ in r)


def words(rng: random.Random, lo: int, hi: int) -> str:
    from tests.builders import random_text

    return random_text(rng, rng.randint(lo, hi))


def build_workloads(seed: int, scale: float = 1.0, stream_seconds: float = 20.0) -> list[Workload]:
    """Word counts are chosen for the token lengths in the docstring above (the bench
    tokenizer makes ~1.07 tokens of a word)."""
    rng = random.Random(seed)
    n = lambda k: max(1, int(k * scale))  # noqa: E731
    grpo = []
    for g in range(n(8)):
        prompt = words(rng, 270, 290)
        grpo.append([{"group_id": f"g{g}", "prompt": prompt, "response": words(rng, 37, 93)} for _ in range(8)])
    pairs = [{"prompt": words(rng, 56, 150), "response": words(rng, 37, 93)} for _ in range(n(64))]
    prm = [{"prompt": words(rng, 20, 40), "steps": [words(rng, 8, 20) for _ in range(8)]} for _ in range(n(32))]
    rubric = []
    for _ in range(n(16)):
        context = [
            {"role": "user", "content": words(rng, 60, 120)},
            {"role": "assistant", "content": words(rng, 60, 120)},
        ]
        rubric.append([{"messages": context + [{"role": "user", "content": c}]} for c in CRITERIA])
    burst = groups_with_repeats(rng, n(32), 8, REPEAT_SHARE, "b")
    stream = groups_with_repeats(rng, n(32), 8, REPEAT_SHARE, "s")
    return [
        Workload("grpo", "/v1/score", "rm", grpo),
        Workload("pairs", "/v1/score", "rm", [pairs[k : k + 4] for k in range(0, len(pairs), 4)]),
        Workload("prm", "/v1/score/steps", "rm_steps", [prm[k : k + 2] for k in range(0, len(prm), 2)]),
        Workload("rubric", "/v1/score", "rm", rubric),
        Workload("burst", "/v1/score", "rm", burst),
        Workload("stream", "/v1/score", "rm", stream, every=stream_seconds / len(stream)),
    ]


REPEAT_SHARE = 0.2


def groups_with_repeats(rng: random.Random, groups: int, size: int, share: float, tag: str) -> list[list[dict]]:
    """GRPO groups where ``share`` of all completions repeat an earlier one of their group."""
    out = []
    for g in range(groups):
        prompt = words(rng, 270, 290)
        out.append([{"group_id": f"{tag}{g}", "prompt": prompt, "response": words(rng, 37, 93)} for _ in range(size)])
    slots = [(g, k) for g in range(groups) for k in range(1, size)]
    for g, k in rng.sample(slots, round(share * groups * size)):
        out[g][k] = {**out[g][k], "response": out[g][rng.randrange(k)]["response"]}
    return out


def attach_token_ids(model_dir: Path, workloads: list[Workload]) -> None:
    """The token ids and readout positions rewardserve's own kinds build for each item."""
    from rewardserve.models.kinds import build_model
    from rewardserve.protocol import Item, ScoreOptions, StepOptions

    outcome = build_model(model_spec("rm", model_dir, "transformers"))
    steps = build_model(model_spec("rm_steps", model_dir, "transformers"))
    for model in (outcome, steps):
        model.load()
    for w in workloads:
        model, options = (steps, StepOptions()) if w.model == "rm_steps" else (outcome, ScoreOptions())
        w.seqs = []
        for request in w.requests:
            works = model.prepare([Item.model_validate(i) for i in request], options)
            w.seqs.append([(list(x.payload.seq.ids), list(x.payload.seq.positions)) for x in works])
    for model in (outcome, steps):
        model.close()


def model_spec(name: str, model_dir: Path, backend: str, dtype: str = "float32", block_size: int | None = None):
    from rewardserve.models.spec import ModelSpec

    engine = {"backend": backend, "dtype": dtype, "max_tokens": 2048}
    options = {"gpu_memory_utilization": 0.25} if backend == "vllm" else {}
    if backend == "vllm" and block_size:
        options["block_size"] = block_size
    if name == "rm":
        return ModelSpec(name="rm", kind="outcome", source=str(model_dir), options=options, **engine)
    return ModelSpec(
        name="rm_steps",
        kind="process",
        source=str(model_dir),
        options={**options, "format": "classifier_tags", "tag": TAG, "activation": "none"},
        **engine,
    )


# --------------------------------------------------------------------------- driving


async def drive(send, requests: list, callers: int, every: float = 0.0) -> tuple[float, list[float], list]:
    """``send(http, i)`` -> that request's scores (one list of floats per item). Returns
    the seconds from the first request to the last answer (with ``every``: from the last
    request sent), each request's latency, and the scores."""
    import httpx

    if every > 0:
        return await drive_open_loop(send, len(requests), every)

    queue: asyncio.Queue = asyncio.Queue()
    for i in range(len(requests)):
        queue.put_nowait(i)
    latencies: list[float] = []
    scores: list = [None] * len(requests)

    async def caller(http):
        while not queue.empty():
            i = queue.get_nowait()
            start = time.perf_counter()
            scores[i] = await send(http, i)
            latencies.append(time.perf_counter() - start)

    async with httpx.AsyncClient(timeout=900, limits=httpx.Limits(max_connections=callers)) as http:
        start = time.perf_counter()
        await asyncio.gather(*(caller(http) for _ in range(callers)))
        return time.perf_counter() - start, latencies, scores


async def drive_open_loop(send, count: int, every: float) -> tuple[float, list[float], list]:
    import httpx

    latencies: list[float] = []
    scores: list = [None] * count

    async def one(http, i: int, at: float) -> float:
        await asyncio.sleep(max(0.0, at - time.perf_counter()))
        sent = time.perf_counter()
        scores[i] = await send(http, i)
        done = time.perf_counter()
        latencies.append(done - sent)
        return done

    async with httpx.AsyncClient(timeout=900, limits=httpx.Limits(max_connections=count)) as http:
        start = time.perf_counter()
        ends = await asyncio.gather(*(one(http, i, start + i * every) for i in range(count)))
    return max(ends) - (start + (count - 1) * every), latencies, scores


def rewardserve_sender(url: str, w: Workload):
    async def send(http, i):
        r = await http.post(url + w.route, json={"model": w.model, "items": w.requests[i]})
        if r.status_code != 200:
            raise RuntimeError(f"{url}{w.route}: {r.status_code} {r.text[:300]}")
        results = r.json()["results"]
        return [x["step_scores"] if w.route == "/v1/score/steps" else [x["score"]] for x in results]

    return send


def vllm_sender(url: str, w: Workload):
    async def send(http, i):
        ids = [s for s, _ in w.seqs[i]]
        if w.route == "/v1/score/steps":
            r = await http.post(url + "/pooling", json={"model": "rm", "input": ids, "use_activation": False})
            r.raise_for_status()
            return [[row[0] if isinstance(row, list) else row for row in d["data"]] for d in r.json()["data"]]
        r = await http.post(url + "/classify", json={"model": "rm", "input": ids, "use_activation": False})
        if r.status_code != 200:
            raise RuntimeError(f"{url}/classify: {r.status_code} {r.text[:300]}")
        return [d["probs"][:1] for d in r.json()["data"]]

    return send


def naive_sender(url: str, w: Workload):
    async def send(http, i):
        body = {"sequences": [s for s, _ in w.seqs[i]], "positions": [p for _, p in w.seqs[i]]}
        r = await http.post(url + "/score", json=body)
        r.raise_for_status()
        return [[row[0] for row in rows] for rows in r.json()["scores"]]

    return send


def raw_forward(model_dir: Path, w: Workload, dtype: str, batch: int = 8) -> tuple[float, list]:
    import torch
    from transformers import AutoModelForSequenceClassification

    from rewardserve.models.backends.kernels.cpu_linear import pack_linears

    model = AutoModelForSequenceClassification.from_pretrained(model_dir, dtype=getattr(torch, dtype)).eval()
    if dtype == "float32":
        pack_linears(model.model)
    # bf16 keeps torch's own linears: oneDNN compiles a kernel per row count, and e's padded
    # batches have a new one each time (packed linears ran pairs at 23.4 items/s, torch's
    # 29.9); rewardserve rounds its packed rows to build those kernels once.
    pad = model.config.pad_token_id
    flat = [s for r in w.seqs for s in r]
    order = sorted(range(len(flat)), key=lambda i: len(flat[i][0]))
    out: list = [None] * len(flat)
    with torch.inference_mode():
        model(input_ids=torch.tensor([flat[0][0]]))  # warm-up
        start = time.perf_counter()
        for k in range(0, len(order), batch):
            rows = order[k : k + batch]
            width = max(len(flat[i][0]) for i in rows)
            ids = torch.full((len(rows), width), pad, dtype=torch.long)
            mask = torch.zeros((len(rows), width), dtype=torch.long)
            for r, i in enumerate(rows):
                ids[r, : len(flat[i][0])] = torch.tensor(flat[i][0])
                mask[r, : len(flat[i][0])] = 1
            hidden = model.model(input_ids=ids, attention_mask=mask).last_hidden_state
            for r, i in enumerate(rows):
                out[i] = model.score(hidden[r, flat[i][1]]).float()[:, 0].tolist()
        seconds = time.perf_counter() - start
    it = iter(out)
    return seconds, [[next(it) for _ in r] for r in w.seqs]


# --------------------------------------------------------------------------- processes


def server_env(vllm_reserved_cpus: str = "0") -> dict[str, str]:
    """The environment every server process of a bench run starts with: vLLM's KV cache
    space (GiB) and reserved cores, quiet logs, no built-in rule models."""
    return {
        "VLLM_CPU_KVCACHE_SPACE": "4",
        "VLLM_CPU_NUM_OF_RESERVED_CPU": vllm_reserved_cpus,
        "VLLM_LOGGING_LEVEL": "WARNING",
        "REWARDSERVE_BUILTIN_RULES": "false",
        "REWARDSERVE_LOG_LEVEL": "warning",
    }


def vllm_server_command(python: str, model_dir: Path, port: int, dtype: str, pooler: dict | None = None) -> list[str]:
    """(c): vLLM's own OpenAI server on the bench model, pooling runner, prefix caching on."""
    cmd = [
        python,
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        str(model_dir),
        "--runner",
        "pooling",
        "--served-model-name",
        "rm",
        "--port",
        str(port),
        "--host",
        "127.0.0.1",
        "--dtype",
        dtype,
        "--max-model-len",
        "2048",
        "--enable-prefix-caching",
    ]
    return cmd + (["--pooler-config", json.dumps(pooler)] if pooler else [])


def start(cmd: list[str], log: Path, env: dict, health: str, timeout: float = 900) -> subprocess.Popen:
    import httpx

    proc = subprocess.Popen(cmd, env={**os.environ, **env}, stdout=open(log, "wb"), stderr=subprocess.STDOUT)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{cmd[:3]} exited ({proc.returncode}); see {log}")
        try:
            if httpx.get(health, timeout=2).status_code == 200:
                return proc
        except httpx.TransportError:
            pass
        time.sleep(1)
    proc.kill()
    raise TimeoutError(f"{cmd[:3]} not ready; see {log}")


def stop(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def keep_best(table: dict, key: tuple, entry: tuple) -> None:
    """Over rounds, each system's fastest run of a workload stands (the machine's speed
    drifts by 10-40% between minutes; every system gets the same number of tries)."""
    if key not in table or entry[0] < table[key][0]:
        table[key] = entry


def run_http(label: str, cmd, log, env, health, url, sender, workloads, warmup, callers, table):
    print(f"{label}: starting", flush=True)
    proc = start(cmd, log, env, health)
    try:
        for w, warm in zip(workloads, warmup):
            asyncio.run(drive(sender(url, warm), warm.requests, callers))
            seconds, latencies, scores = asyncio.run(drive(sender(url, w), w.requests, callers, w.every))
            keep_best(table, (label, w.name), (seconds, latencies, scores))
            print(
                f"  {w.name}: {seconds:.2f} s" + ("" if w.every else f", {w.items / seconds:.2f} items/s"), flush=True
            )
    finally:
        stop(proc)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--callers", type=int, default=8)
    parser.add_argument("--vllm-python", default=str(ROOT / ".venv-vllm" / "bin" / "python"))
    parser.add_argument("--only", default="grpo,pairs,prm,rubric,burst,stream")
    # (e) always runs: every score is checked against it.
    parser.add_argument("--systems", default="abcd", help="which of a-d run besides (e)")
    parser.add_argument("--scale", type=float, default=1.0, help="shrink the workloads (smoke runs)")
    parser.add_argument("--rounds", type=int, default=2, help="run every system this many times; best kept")
    parser.add_argument(
        "--stream-seconds",
        type=float,
        default=20.0,
        help="the stream workload's groups arrive over this long (the rate: 256 items over it)",
    )
    # vLLM on CPU keeps a core for its scheduler by default; on 2 cores that halves its
    # compute. 0 gives it both (measured faster here); the value is printed with the table.
    parser.add_argument("--vllm-reserved-cpus", default="0")
    # Every system runs this dtype (bfloat16: on CPUs with avx512_bf16 / AMX).
    parser.add_argument("--dtype", choices=["float32", "bfloat16"], default="float32")
    # (b)'s KV-cache block size (its prefix cache's unit); unset: the backend's (32 on a CPU;
    # (c) runs vLLM's own, 128).
    parser.add_argument("--b-block-size", type=int, default=None)
    args = parser.parse_args()

    from tests.builders import build_sequence_classifier
    from tests.harness import free_port

    chosen = args.only.split(",")
    workloads = [
        w for w in build_workloads(seed=1, scale=args.scale, stream_seconds=args.stream_seconds) if w.name in chosen
    ]
    warmup = [
        w for w in build_workloads(seed=2, scale=0.25, stream_seconds=args.stream_seconds / 4) if w.name in chosen
    ]
    vllm_env = server_env(args.vllm_reserved_cpus)
    table: dict = {}
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        model_dir = build_sequence_classifier(
            tmp / "rm", "qwen3", hidden=1024, layers=8, heads=8, head_dim=128, max_positions=4096, extra_tokens=(TAG,)
        )
        attach_token_ids(model_dir, workloads + warmup)
        for w in workloads:
            print(f"{w.name}: {len(w.requests)} requests, {w.items} items, {w.tokens} tokens", flush=True)
        import yaml
        from transformers import AutoTokenizer

        tag_id = AutoTokenizer.from_pretrained(model_dir).convert_tokens_to_ids(TAG)
        for round_ in range(args.rounds):
            print(f"round {round_ + 1} of {args.rounds}", flush=True)
            for label, backend, python in [("a", "transformers", sys.executable), ("b", "vllm", args.vllm_python)]:
                if label not in args.systems:
                    continue
                if backend == "vllm" and not Path(python).exists():
                    print(f"({label}) skipped: {python} missing (make vllm-venv)")
                    continue
                config = tmp / f"{label}.yaml"
                specs = [
                    model_spec(n, model_dir, backend, args.dtype, args.b_block_size).model_dump(exclude_defaults=True)
                    for n in ("rm", "rm_steps")
                ]
                config.write_text(yaml.safe_dump({"models": specs}))
                port = free_port()
                url = f"http://127.0.0.1:{port}"
                run_http(
                    label,
                    [python, "-m", "rewardserve.cli", "serve", "--port", str(port), "--config", str(config)],
                    tmp / f"{label}.log",
                    vllm_env,
                    url + "/ready",
                    url,
                    rewardserve_sender,
                    workloads,
                    warmup,
                    args.callers,
                    table,
                )
            if "c" in args.systems and Path(args.vllm_python).exists():
                # vLLM's server serves one pooling task: classify for sequence scores, and a
                # second start with token_classify (only the step tags' rows) for the PRM.
                for task in ("classify", "token_classify"):
                    chosen_w = [
                        (w, warm) for w, warm in zip(workloads, warmup) if (w.name == "prm") == (task != "classify")
                    ]
                    if not chosen_w:
                        continue
                    port = free_port()
                    url = f"http://127.0.0.1:{port}"
                    pooler = (
                        {"task": task, "tok_pooling_type": "STEP", "step_tag_id": tag_id}
                        if task != "classify"
                        else {"task": task}
                    )
                    run_http(
                        "c",
                        vllm_server_command(args.vllm_python, model_dir, port, args.dtype, pooler),
                        tmp / f"c-{task}.log",
                        vllm_env,
                        url + "/health",
                        url,
                        vllm_sender,
                        [w for w, _ in chosen_w],
                        [warm for _, warm in chosen_w],
                        args.callers,
                        table,
                    )
            if "d" in args.systems:
                port = free_port()
                url = f"http://127.0.0.1:{port}"
                run_http(
                    "d",
                    [sys.executable, str(ROOT / "bench" / "naive_server.py"), str(model_dir), str(port), args.dtype],
                    tmp / "d.log",
                    {},
                    url + "/health",
                    url,
                    naive_sender,
                    workloads,
                    warmup,
                    args.callers,
                    table,
                )
            print("e: in process", flush=True)
            for w in workloads:
                seconds, scores = raw_forward(model_dir, w, args.dtype)
                keep_best(table, ("e", w.name), (seconds, [], scores))
                print(f"  {w.name}: {w.items / seconds:.2f} items/s", flush=True)
    report(workloads, table, args)


def report(workloads: list[Workload], table: dict, args) -> None:
    names = {
        "a": "rewardserve (transformers)",
        "b": "rewardserve (vLLM backend)",
        "c": "vLLM server",
        "d": "naive server",
        "e": "raw forward, unshared",
    }
    import torch

    # Ratios move with the machine (oneDNN vs MKL, bf16 kernels): say which one ran them.
    capability = torch.backends.cpu.get_cpu_capability()
    print(
        f"\n{cpu_name()}, {os.cpu_count()} CPUs; torch {torch.__version__} ({capability}); "
        f"Python {platform.python_version()}"
    )
    print(
        f"dtype {args.dtype}; vLLM reserved CPUs: {args.vllm_reserved_cpus}; callers: {args.callers}; "
        f"best of {args.rounds} rounds; stream over {args.stream_seconds:g} s"
    )
    for w in workloads:
        print(f"\n{w.name}: {len(w.requests)} requests, {w.items} items, {w.tokens} tokens")
        # burst: seconds from the first request to the last reward; stream: from the last
        # group sent to its reward (rates mean nothing there).
        print(
            f"  {'system':<28}{'items/s':>9}{'tokens/s':>10}{'seconds':>9}{'p50 ms':>9}{'p99 ms':>9}"
            f"{'max |diff| vs e':>17}"
        )
        rate, took = {}, {}
        ref = [x for r in table[("e", w.name)][2] for item in r for x in item]
        for label in "abcde":
            if (label, w.name) not in table:
                continue
            seconds, latencies, scores = table[(label, w.name)]
            flat = [x for r in scores for item in r for x in item]
            diff = max(abs(x - y) for x, y in zip(flat, ref)) if len(flat) == len(ref) else float("nan")
            lat = sorted(latencies)
            p50 = f"{statistics.median(lat) * 1000:.0f}" if lat else "-"
            p99 = f"{lat[min(len(lat) - 1, int(0.99 * len(lat)))] * 1000:.0f}" if lat else "-"
            if w.every and label == "e":
                print(f"  {names[label]:<28}{'-':>9}{'-':>10}{'-':>9}{p50:>9}{p99:>9}{diff:>17.2e}")
                continue
            took[label] = seconds
            rates = ("-", "-") if w.every else (f"{w.items / seconds:.2f}", f"{w.tokens / seconds:.0f}")
            if not w.every:
                rate[label] = w.items / seconds
            print(f"  {names[label]:<28}{rates[0]:>9}{rates[1]:>10}{seconds:>9.2f}{p50:>9}{p99:>9}{diff:>17.2e}")
        pairs = [("a", "c"), ("a", "e"), ("a", "d"), ("b", "c")]
        if w.every or w.name == "burst":
            print(
                "  time: "
                + ",  ".join(f"{x}/{y} = {took[x] / took[y]:.2f}" for x, y in pairs if x in took and y in took)
            )
        else:
            print("  " + ",  ".join(f"{x}/{y} = {rate[x] / rate[y]:.2f}" for x, y in pairs if x in rate and y in rate))


def fresh_seed(seed: int | None) -> int:
    """The seed asked for, or a new one each run (no cache of any system has seen its texts)."""
    return seed if seed is not None else random.SystemRandom().randint(0, 2**31)


def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


if __name__ == "__main__":
    main()
