"""VL-RewardBench's rows, groups and accuracies (cli/vl_rewardbench.py), and
``eval --format vl-rewardbench`` on a VLM reward model, its images sent with the rows."""

from __future__ import annotations

import base64
import io
import json

import pytest

from rewardserve.cli import benchmarks, vl_rewardbench
from rewardserve.cli.main import main
from tests.models.kinds.test_vlm import picture, reference


def png_base64(seed: int) -> str:
    buffer = io.BytesIO()
    picture(seed).save(buffer, format="PNG")
    return base64.b64encode(buffer.getvalue()).decode("ascii")


def test_the_group_is_read_from_the_id_s_prefix_as_cal_py_reads_it():
    """vl-rewardbench/VL_RewardBench@9b10abd cal.py: the text before the first "_" or "-"."""
    expected = {
        "RLAIF-V-1234": "hallucination",
        "RLHF-V-77": "hallucination",
        "hallucination_pair-12": "hallucination",
        "mathverse_3": "reasoning",
        "mmmu_pro_9": "reasoning",
        "wildvision-battle-5": "general",
        "VLFeedback-8": "general",
        "rlaif-lowercase": "general",  # cal.py's match is case-sensitive
        "RLAIFV_1": "general",  # and the whole prefix
        "mmmu2_4": "general",
    }
    assert {k: vl_rewardbench.group_of(k) for k in expected} == expected


def test_overall_pools_rows_and_macro_averages_the_groups():
    rows = [{"id": i} for i in ["RLAIF-V-1", "RLAIF-V-2", "RLAIF-V-3", "mathverse_1", "wildvision-1"]]
    scores = [[1.0, 0.0], [1.0, 0.0], [0.0, 1.0], [2.0, 2.0], [0.5, 0.1]]  # preferred first
    out = vl_rewardbench.vl_rewardbench(list(zip(rows, scores)))
    assert out["subsets"] == {"general": 1.0, "hallucination": pytest.approx(2 / 3), "reasoning": 0.0}
    assert out["overall_accuracy"] == pytest.approx(3 / 5)
    assert out["score"] == pytest.approx((1 + 2 / 3 + 0) / 3) and out["ties"] == 1 and out["complete"]


def test_rows_that_are_not_its_own_are_named():
    row = {"id": "x", "query": "q", "image": {"bytes": png_base64(1)}, "response": ["a", "b"], "human_ranking": [0, 1]}
    assert len(benchmarks.row_items("vl-rewardbench", row, 1)) == 2
    for bad, said in (
        ({**row, "human_ranking": [0, 0]}, "human_ranking"),
        ({**row, "human_ranking": [0, "x"]}, "human_ranking"),
        ({**row, "response": ["a"]}, "two strings"),
        ({**row, "image": {"bytes": "not base64!"}}, "not base64"),
        ({**row, "image": {"bytes": base64.b64encode(b"hello, not an image").decode()}}, "does not decode"),
        ({**row, "image": "/etc/passwd"}, "data:image"),
    ):
        with pytest.raises(ValueError, match=said):
            benchmarks.row_items("vl-rewardbench", bad, 4)


def test_eval_format_vl_rewardbench_scores_each_response_with_its_image(vl_value, tmp_path, capsys):
    rows = [
        {
            "id": row_id,
            "query": f"What is in picture {k}?",
            "image": {"bytes": png_base64(k)} if k % 2 else f"data:image/png;base64,{png_base64(k)}",
            "response": [f"Noise {k}.", "A cat sitting on a mat, clearly."],
            "human_ranking": [[0, 1], [1, 0]][k % 2],
        }
        for k, row_id in enumerate(["RLAIF-V-1", "mathverse_2", "wildvision-battle-3"])
    ]
    source = tmp_path / "vlrb.jsonl"
    source.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "out"
    main(
        [
            "eval",
            "--format",
            "vl-rewardbench",
            "--serve",
            f"vl={vl_value}:vlm",
            "--model",
            "vl",
            str(source),
            "-o",
            str(out),
        ]
    )
    printed = capsys.readouterr().out
    assert "vl-rewardbench" in printed
    results = json.loads((out / "results.json").read_text())
    scored = [json.loads(line)["scores"] for line in (out / "rows.jsonl").read_text().splitlines()]
    for k, (row, (preferred, other)) in enumerate(zip(rows, scored)):
        first = row["human_ranking"].index(0)
        for response, got in ((row["response"][first], preferred), (row["response"][1 - first], other)):
            conv = [
                {"role": "user", "content": [picture(k), row["query"]]},
                {"role": "assistant", "content": response},
            ]
            assert got == pytest.approx(reference(vl_value, conv, "value_head"), abs=1e-4)
    expected = benchmarks.summary("vl-rewardbench", rows, scored)
    assert results["subsets"] == expected["subsets"] and results["score"] == expected["score"]
    assert set(results["subsets"]) == {"general", "hallucination", "reasoning"}
