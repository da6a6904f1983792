"""``rewardserve eval`` decides every pair as the ``rewardbench`` package's own run does
(PyPI rewardbench 0.1.4, ``rewardbench --dataset FILE --load_json``, rewardbench.py), on
the same local model and pairs. rewardbench pins transformers 4.51, so it runs from its
own virtualenv, ``make rewardbench-venv``, which ``make test`` builds beside the others
(seconds from uv's cache)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from rewardserve.cli.main import main

ROOT = Path(__file__).resolve().parents[2]
RB_PYTHON = ROOT / ".venv-rewardbench" / "bin" / "python"


@pytest.mark.long(20)
def test_eval_agrees_with_rewardbench_pair_by_pair(qwen3_rm, tmp_path, capsys):
    if not RB_PYTHON.exists():
        pytest.skip(f"{RB_PYTHON} is missing: `make rewardbench-venv` builds it")
    # The checkpoint as transformers 4.51 reads it: a tokenizer class it knows (the
    # tokenizer.json, and so the tokens, stay the same).
    model = tmp_path / "rm"
    shutil.copytree(qwen3_rm, model)
    config_path = model / "tokenizer_config.json"
    config = json.loads(config_path.read_text())
    config["tokenizer_class"] = "PreTrainedTokenizerFast"
    config["model_input_names"] = ["input_ids", "attention_mask"]  # as Qwen tokenizers
    config_path.write_text(json.dumps(config))

    prompts = [f"Which colour is the sky at {h} o'clock?" for h in range(12)]
    answers = ["Blue.", "Grey, mostly.", "It depends on the weather.", "Black at night.", "Red at dusk!"]
    pairs = [(p, answers[k % 5], answers[(k * 3 + 1) % 5]) for k, p in enumerate(prompts)]
    ours = [{"prompt": p, "chosen": c, "rejected": r, "subset": "sky"} for p, c, r in pairs]
    theirs = [
        {
            "prompt": p,
            "chosen": [{"role": "user", "content": p}, {"role": "assistant", "content": c}],
            "rejected": [{"role": "user", "content": p}, {"role": "assistant", "content": r}],
        }
        for p, c, r in pairs
    ]
    (tmp_path / "ours.jsonl").write_text("".join(json.dumps(x) + "\n" for x in ours))
    (tmp_path / "theirs.json").write_text("".join(json.dumps(x) + "\n" for x in theirs))

    # rewardbench's pipeline sends every batch to "cuda" (rewardbench/models/pipeline.py,
    # `.to("cuda")`); on a machine without a GPU that one device is read as the CPU, in
    # the rewardbench process only. Everything else is its code as released.
    shim = tmp_path / "shim"
    shim.mkdir()
    (shim / "sitecustomize.py").write_text(
        "import transformers.tokenization_utils_base as base\n"
        "_to = base.BatchEncoding.to\n"
        "base.BatchEncoding.to = lambda self, device, *a, **k: _to(\n"
        "    self, 'cpu' if str(device).startswith('cuda') else device, *a, **k)\n"
    )
    done = subprocess.run(
        [
            str(RB_PYTHON),
            "-m",
            "rewardbench.rewardbench",
            "--model",
            str(model),
            "--dataset",
            str(tmp_path / "theirs.json"),
            "--load_json",
            "--batch_size",
            "1",
            "--torch_dtype",
            "float32",
            "--not_quantized",
            "--output_dir",
            str(tmp_path / "rb"),
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
        env={
            **os.environ,
            "HF_HUB_OFFLINE": "1",
            "HF_DATASETS_OFFLINE": "1",
            "WANDB_MODE": "disabled",
            "PYTHONPATH": str(shim),
        },
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    (outputs,) = list(Path("/").glob(str(model).lstrip("/") + "_outputs.jsonl")) or list(
        (tmp_path / "rb").rglob("*_outputs.jsonl")
    )
    rows = [json.loads(line) for line in outputs.read_text().splitlines()]

    main(
        ["eval", "--serve", f"rm={model}", "--model", "rm", str(tmp_path / "ours.jsonl"), "-o", str(tmp_path / "eval")]
    )
    mine = [json.loads(line) for line in (tmp_path / "eval" / "pairs.jsonl").read_text().splitlines()]
    assert [r["correct"] for r in mine] == [float(r["results"]) for r in rows]
    assert [r["chosen"] for r in mine] == pytest.approx([r["scores_chosen"] for r in rows], abs=1e-4)
    assert [r["rejected"][0] for r in mine] == pytest.approx([r["scores_rejected"] for r in rows], abs=1e-4)
    assert 0 < sum(r["correct"] for r in mine) < len(mine), "pairs both ways, so the check can fail"
    capsys.readouterr()
