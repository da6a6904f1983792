"""``rewardserve demo-models DIR``: one small local stand-in per kind of the README's
config, built by ``tiny.py`` and saved as a hub checkpoint is, and ``models-demo.yaml``
serving them under the README's model names. Everything the README shows then runs
offline on a CPU in seconds; the scores are a random model's, the shapes real."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

DEMO_CONFIG = "models-demo.yaml"
# The README's models.yaml entries that are served without weights of their own: a rule,
# and an ensemble of two stand-ins. Written into the config as they are.
UNBUILT: list[dict[str, Any]] = [
    {"name": "boxed", "kind": "rule", "source": "exact_match", "options": {"args": {"extract": "boxed"}}},
    {
        "name": "mix",
        "kind": "ensemble",
        "source": "ensemble",
        "options": {"members": ["skywork", {"name": "prm", "weight": 0.5}], "normalize": "running"},
    },
]


# Tiny random models run as fast in torch's own kernels: prepacking their linears for
# oneDNN and compiling their layers would cost most of the demo's start for nothing.
TINY_OPTIONS: dict[str, Any] = {"cpu_linear": "torch", "compile_layers": False, "compile_norms": False}


def _demo_models() -> list[tuple[dict[str, Any], Callable[[Path], Path], str]]:
    """(config entry without its source, builder, what the real checkpoint would be)."""
    from rewardserve.models.demo import tiny

    return [
        (
            {"name": "skywork", "kind": "outcome", "options": TINY_OPTIONS},
            lambda out: tiny.build_sequence_classifier(out, "qwen3"),
            "Skywork/Skywork-Reward-V2-Qwen3-0.6B",
        ),
        (
            {"name": "prm", "options": TINY_OPTIONS},
            tiny.build_qwen2_prm,
            "Qwen/Qwen2.5-Math-PRM-7B (kind and readout from its preset)",
        ),
        ({"name": "judge", "kind": "verifier", "options": TINY_OPTIONS}, tiny.build_qwen3_lm, "Qwen/Qwen3-1.7B"),
        (
            {"name": "vl-rm", "kind": "vlm", "preset": "skywork-vl-reward"},
            tiny.build_qwen2_vl,
            "Skywork/Skywork-VL-Reward-7B",
        ),
        ({"name": "clip", "kind": "clip_goal"}, tiny.build_clip, "openai/clip-vit-base-patch32"),
    ]


def write_demo_models(directory: Path, log: Callable[[str], None] = lambda _line: None) -> Path:
    """Build every demo model under ``directory`` (one folder each, by model name) and
    write the config that serves them; returns the config's path. Building again
    replaces the models."""
    import yaml
    from transformers.utils import logging as transformers_logging

    directory = directory.resolve()
    directory.mkdir(parents=True, exist_ok=True)
    entries = []
    # Saving prints a progress bar per shard and notes on the random configs: noise in
    # a command whose output is the list of what it wrote.
    verbosity, bars = transformers_logging.get_verbosity(), transformers_logging.is_progress_bar_enabled()
    transformers_logging.set_verbosity_error()
    transformers_logging.disable_progress_bar()
    try:
        built = [(entry, build(directory / entry["name"]), real) for entry, build, real in _demo_models()]
    finally:
        transformers_logging.set_verbosity(verbosity)
        if bars:
            transformers_logging.enable_progress_bar()
    for entry, source, real in built:
        log(f"{entry['name']}: {source} (stands in for {real})")
        entries.append({**entry, "source": str(source)})
        if "options" in entry:  # the source before the options, as the README writes entries
            entries[-1]["options"] = dict(entries[-1].pop("options"))
    entries += [dict(entry) for entry in UNBUILT]  # the README's models with no weights of their own
    config = directory / DEMO_CONFIG
    header = (
        "# Written by `rewardserve demo-models`: tiny random models with the real ones'\n"
        "# architectures, tokenizers and heads. Serve them with\n"
        f"#   rewardserve serve --config {config}\n"
    )
    config.write_text(header + yaml.safe_dump({"models": entries}, sort_keys=False))
    return config
