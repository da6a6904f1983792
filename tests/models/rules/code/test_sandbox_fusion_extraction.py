"""SandboxFusion's extraction (models/rules/code/sandbox_fusion.py) against its own
``default_extract_helper`` (sandbox/utils/extraction.py, bytedance/SandboxFusion 469de08):
the code it took from each completion of make_sandbox_fusion_verdicts.completions(), as that
script wrote it, or live where ``SANDBOXFUSION_SRC`` names a checkout."""

from __future__ import annotations

import json
import os

from rewardserve.models.rules.code.sandbox_fusion import sandbox_fusion_code
from tests.models.rules.code.make_sandbox_fusion_verdicts import (
    VERDICTS,
    code_digest,
    completions,
    pairs_digest,
    sandbox_fusion_live,
)


def sandbox_fusion_took(cases: list[tuple[str, str]]) -> list[str]:
    checkout = os.environ.get("SANDBOXFUSION_SRC")
    if checkout:
        return sandbox_fusion_live(checkout)[0]
    written = json.loads(VERDICTS.read_text())
    assert written["completions_sha256"] == pairs_digest(cases), "completions() changed: run the script"
    assert written["commit"] == "469de0845cb7d665bc68044d541aa3aa28c5b30a"
    return list(written["extracted_sha256_16"])


def test_the_code_sandbox_fusion_takes_from_every_completion():
    cases = completions()
    assert len(cases) >= 300
    theirs = sandbox_fusion_took(cases)
    ours = [code_digest(sandbox_fusion_code(completion, language)) for completion, language in cases]
    differ = [(completion[:80], language) for (completion, language), o, t in zip(cases, ours, theirs) if o != t]
    assert not differ, differ[:10]
    assert len(set(ours)) >= 50  # the cases reach many different answers


def test_a_tagged_block_wins_over_an_earlier_untagged_one():
    completion = "```\nprint(0)\n```\ntext\n```py\nprint(1)\n```\n"
    assert sandbox_fusion_code(completion, "python") == "print(1)"
    assert sandbox_fusion_code(completion, "cpp") == "print(0)"
    assert sandbox_fusion_code("```python\nprint(2)\n", "python") == "print(2)\n"
    unfenced = "import os\ndef f():\n    return 1\nf()"
    assert sandbox_fusion_code(unfenced, "python") == "import os\ndef f():\n    return 1\n"
    assert sandbox_fusion_code("print(3)", "python") == ""  # nothing to take: nothing runs


def test_hostile_completions_cost_one_pass():
    """Inputs on which SandboxFusion's regular expressions backtrack quadratically."""
    megabyte = 1 << 20
    assert sandbox_fusion_code("```python\n" + "\n" * megabyte, "python") == "\n" * megabyte
    assert sandbox_fusion_code("```\n" + " \n" * (megabyte // 2) + "x```", "python").startswith(" \n")
    imports = "import a\n" * (megabyte // 9) + "x = 1\ndef g():\n  pass\n"
    assert sandbox_fusion_code(imports, "python") == "def g():\n  pass\n"
    assert sandbox_fusion_code("```" * (megabyte // 3), "python") == ""
