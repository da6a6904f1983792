"""A reward model trained beside the run (``rm_updates``): every ``every`` steps the newest
checkpoint a trainer saved under ``checkpoints`` (a folder of checkpoint folders, as
``save_pretrained`` writes them) is pushed to the served model through the admin API's
``weights`` call, its folder's name as the version. The service writes it in place where
it can; a checkpoint it refuses (still being written, another model's) leaves the
current one scoring, with a warning, and is tried again at the next update."""

from __future__ import annotations

import logging
from pathlib import Path

from rewardserve.client.errors import APIStatusError
from rewardserve.client.sync import RewardClient

log = logging.getLogger("rewardserve.grpo")


def newest_checkpoint(folder: Path) -> Path | None:
    """The most recently written checkpoint folder under ``folder`` (one holding a
    config.json and safetensors weights), the later name first among equal times; a
    folder the trainer removes while it is looked at is passed over."""

    def written(path: Path) -> float | None:
        try:
            if not (path / "config.json").is_file() or not any(path.glob("*.safetensors")):
                return None
            return max(f.stat().st_mtime for f in path.iterdir())
        except (OSError, ValueError):  # gone meanwhile, or emptied
            return None

    try:
        candidates = [p for p in folder.iterdir() if p.is_dir()] if folder.is_dir() else []
    except OSError:
        return None
    found = [(when, p.name, p) for p in candidates if (when := written(p)) is not None]
    return max(found)[2] if found else None


class RMUpdater:
    def __init__(self, service: str | list[str], admin_key: str | None, model: str, checkpoints: Path, every: int):
        if not admin_key:
            raise ValueError("rm_updates needs admin_key: the service's admin API takes the new weights")
        self.client = RewardClient(service, api_key=admin_key)
        self.model, self.checkpoints, self.every = model, checkpoints, every
        self.pushed: str | None = None

    def at_step(self, step: int) -> str | None:
        """Before step ``step`` (0-based): the newest checkpoint pushed when an update is
        due and one is there that was not pushed yet; the version pushed, or None."""
        if step == 0 or step % self.every:
            return None
        newest = newest_checkpoint(self.checkpoints)
        if newest is None or newest.name == self.pushed:
            return None
        try:
            state = self.client.admin.weights(self.model, str(newest), version=newest.name)
        except APIStatusError as exc:
            log.warning(
                "reward model %s: checkpoint %s not taken (%s); the current one scores on",
                self.model,
                newest,
                exc.message,
            )
            return None
        self.pushed = newest.name
        log.info("reward model %s: version %s from %s (%s)", self.model, newest.name, newest, state.weights_update)
        return newest.name

    def close(self) -> None:
        self.client.close()
