"""Service settings: ``REWARDSERVE_*`` environment, CLI flags, and a YAML model list.

Precedence: CLI flags > environment > defaults. The YAML file (``--config`` or
``REWARDSERVE_CONFIG``) lists models under ``models:``; ``--model NAME=SOURCE`` adds more.
The fields come in groups, one class per area (SETTINGS_GROUPS); Settings inherits them all.
"""

from __future__ import annotations

import difflib
import re
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from rewardserve.engine.tenants import BATCH_MS, TenantSpec
from rewardserve.models.rules.worker import DEFAULT_PRIORITY, WorkerPriority
from rewardserve.models.spec import ModelSpec, describe_spec_error
from rewardserve.models.yaml_files import load_yaml

if TYPE_CHECKING:
    from rewardserve.engine.pools.runner import RuleLimits
    from rewardserve.models.images import ImagePolicy

# Served unless turned off: they need no weights, so `rewardserve serve` is useful offline.
BUILTIN_RULES = (
    ModelSpec(name="math", kind="rule", source="math_equiv"),
    ModelSpec(name="exact_match", kind="rule", source="exact_match"),
    # Each call runs a completion's tests in a sandbox (models/rules/code/__init__.py): its limit is
    # the tests' own (6 s each by default) and not the pools' 5 s.
    ModelSpec(name="code", kind="rule", source="code_tests", options={"timeout_s": 300.0}),
)


def _comma_separated(value: Any) -> Any:
    if isinstance(value, str):
        return [part.strip() for part in value.split(",") if part.strip()]
    return value


# Keys, origins and hosts: the environment gives them comma-separated, not as JSON.
CommaSeparated = Annotated[list[str], NoDecode, BeforeValidator(_comma_separated)]


class SettingsGroup(BaseModel):
    """The settings of one area of the service. Settings inherits every group, so a field
    keeps its flat name (``settings.max_body_bytes``), its ``REWARDSERVE_`` variable and its
    flag; a group's docstring is its section of docs/reference/settings.md (summary line:
    the heading; the rest: the intro)."""

    model_config = ConfigDict(extra="forbid")


class ListenerSettings(SettingsGroup):
    """Listening.

    Where the service listens, what it shows a caller without a key, how it logs and how
    it stops on SIGTERM."""

    host: str = "127.0.0.1"
    port: int = Field(default=8000, ge=0, le=65535)
    # /docs (Swagger UI, its assets served from here) and /openapi.json, behind the API
    # key when keys are set; false: off.
    docs: bool = True
    # false: /ready and /metrics name no model unless the request carries a valid key.
    public_model_names: bool = True
    # Origins a browser may call the API from (CORS); empty: no CORS headers at all.
    cors_origins: CommaSeparated = Field(default_factory=list)
    log_level: str = "info"
    # text: one line per record; json: one JSON object per line (service/observability/logs.py).
    log_format: Literal["text", "json"] = "text"
    # SIGTERM: refuse new work with 503 for drain_seconds, then wait for in-flight
    # requests at most graceful_seconds.
    drain_seconds: float = Field(default=5.0, ge=0)
    graceful_seconds: int = Field(default=30, ge=0)


class ModelSettings(SettingsGroup):
    """Models.

    What is served: a config file's models, models given here, the built-in rules, and
    what happens when one of them cannot load."""

    config: Path | None = None
    models: list[ModelSpec] = Field(default_factory=list)
    builtin_rules: bool = True
    default_model: str | None = None  # for routes that name no model (OpenRLHF /get_reward)
    # false: a model that cannot be built or loaded stops the service (exit code 1);
    # true: the others are served and that one answers 503 with its error.
    keep_going: bool = False
    # Tokenizers of the policies being trained, by name (a local directory or a hub id),
    # loaded at start: /v1/score/steps' options.policy_tokenizer names one, to answer a
    # reward per token of the items' response_token_ids. A request never names a path.
    policy_tokenizers: dict[str, str] = Field(default_factory=dict)


class TenancySettings(SettingsGroup):
    """Keys and tenants.

    Who may score: the scoring keys, and tenants (each with keys of its own and a share
    of the service)."""

    api_keys: CommaSeparated = Field(default_factory=list)
    api_keys_file: Path | None = None
    # Tenants (engine/tenants.py): a YAML file with a `tenants:` list; the config file
    # may hold one too.
    tenants_file: Path | None = None
    # While several tenants use a model, its batches are kept to about this much compute,
    # so that one tenant's item never waits behind a long batch of another's.
    tenant_batch_ms: float = Field(default=BATCH_MS, gt=0)

    def accepted_keys(self) -> list[str]:
        """The keys of no tenant (api_keys, api_keys_file); the tenants' come with them."""
        keys = list(self.api_keys)
        if self.api_keys_file is not None:
            lines = self.api_keys_file.read_text(encoding="utf-8").splitlines()
            keys += [line.strip() for line in lines if line.strip() and not line.startswith("#")]
        return keys


class LimitSettings(SettingsGroup):
    """Limits.

    What one connection or request may ask before it is refused, before the work it
    would cause: see [limits](limits.md) for these and the caps fixed in the code."""

    max_body_bytes: int = Field(default=32 * 1024 * 1024, gt=0)
    max_items_per_request: int = Field(default=4096, gt=0)
    # What one request may make the service do: its items, judge prompts, compared pairs,
    # rule calls and template renders together (engine/executor.py charge_work).
    max_work_per_request: int = Field(default=32_768, gt=0)
    # JSON values (objects, lists, strings, numbers) in one body, counted before parsing.
    max_json_values: int = Field(default=500_000, gt=0)
    # Connections (service/server.py): at most this many open at once (more are refused
    # with a 503), a request's headers must arrive within header_timeout_s, an idle
    # keep-alive connection is closed after keep_alive_s.
    max_connections: int = Field(default=1024, gt=0)
    header_timeout_s: float = Field(default=10.0, gt=0)
    # A request's body must have arrived this long after its headers (else 408, closed).
    body_timeout_s: float = Field(default=30.0, gt=0)
    # Requests one tenant (or, without tenants, all clients together) may have open at
    # once, counted from their headers to their answer; over it, 429. 0: a quarter of
    # max_connections, at least 16.
    max_requests_per_tenant: int = Field(default=0, ge=0)
    keep_alive_s: float = Field(default=5.0, gt=0)

    def requests_per_tenant(self) -> int:
        return self.max_requests_per_tenant or max(16, self.max_connections // 4)


class RulePoolSettings(SettingsGroup):
    """Rule pools.

    The worker processes every rule call runs in: how many, each call's time and memory,
    the calls queued, and how they stay off the cores the models need."""

    # Rule pools (models/rules/worker.py): workers (0: twice the cores, 3 to 8), a
    # call's time and memory, calls queued at most.
    rule_workers: int = Field(default=0, ge=0)
    rule_timeout_s: float = Field(default=5.0, gt=0)
    rule_memory_mb: int = Field(default=1024, gt=0)
    rule_queue_max: int = Field(default=200_000, gt=0)
    # The share of the machine's cores the rule workers may keep busy at once (each pool;
    # None: every worker). Workers run at the lowest CPU priority whatever this says; a
    # share keeps rules off the cores the forwards need even where priority is not enough
    # (a container's CPU quota, say).
    rule_cpu_share: float | None = Field(default=None, gt=0, le=1)
    # How the rule workers and the sandboxes they start stay below the serving process
    # (models/rules/worker.py): "nice" (niceness 19) or "idle" (SCHED_IDLE: only cores
    # nothing else wants, so a forward never waits behind a rule; on a CPU the forwards
    # keep busy, rules then get less time and may reach their limit sooner).
    rule_priority: WorkerPriority = DEFAULT_PRIORITY

    def rule_limits(self) -> RuleLimits:
        from rewardserve.engine.pools.runner import RuleLimits

        return RuleLimits(
            workers=self.rule_workers,
            timeout_s=self.rule_timeout_s,
            memory_mb=self.rule_memory_mb,
            max_queued=self.rule_queue_max,
            cpu_share=self.rule_cpu_share,
            priority=self.rule_priority,
        )


class CodeSandboxSettings(SettingsGroup):
    """Code sandbox.

    The built-in `code` model, which runs completions' tests in a sandbox: the most a
    request may ask of it, and what it does where no sandbox can start."""

    # The most a request's options.code may ask per test (a request over them is a 422
    # naming the setting's arg).
    code_max_timeout_s: float = Field(default=60.0, gt=0, le=600)
    code_max_memory_mb: int = Field(default=4096, ge=64, le=65536)
    # Each code item's whole time (its tests, a checker): past it the pool kills the call;
    # the item answers before it, its tests not run by then TLE.
    code_call_timeout_s: float = Field(default=300.0, gt=0, le=3600)
    # Where the code model's sandbox cannot start here (no bwrap, no user namespaces),
    # run completions without it: rlimits only, as this service's user. Off, the code
    # model refuses to load and names what is missing.
    unsafe_code_exec: bool = False

    def code_model(self, spec: ModelSpec) -> ModelSpec:
        """The built-in code model's entry with these caps and this call limit."""
        args: dict[str, Any] = {"max_timeout_s": self.code_max_timeout_s, "max_memory_mb": self.code_max_memory_mb}
        if self.unsafe_code_exec:
            args["unsafe_exec"] = True
        options = {**spec.options, "timeout_s": self.code_call_timeout_s, "args": args}
        return spec.model_copy(update={"options": options})


class ImageSettings(SettingsGroup):
    """Images.

    Where images may come from and how large they may be, one by one and per request."""

    # Images: data URLs only, unless hosts are allowlisted (comma-separated).
    image_url_allowlist: CommaSeparated = Field(default_factory=list)
    max_image_bytes: int = Field(default=20 * 1024 * 1024, gt=0)
    max_image_pixels: int = Field(default=40_000_000, gt=0)
    max_images_per_item: int = Field(default=16, gt=0)
    # All images of one request together, decoded (a 6,300 x 6,300 image is 40 M).
    max_request_pixels: int = Field(default=64_000_000, gt=0)
    image_fetch_timeout_s: float = Field(default=5.0, gt=0)

    def image_policy(self) -> ImagePolicy:
        from rewardserve.models.images import ImagePolicy

        return ImagePolicy(
            max_bytes=self.max_image_bytes,
            max_pixels=self.max_image_pixels,
            max_images=self.max_images_per_item,
            max_request_pixels=self.max_request_pixels,
            url_allowlist=tuple(self.image_url_allowlist),
            fetch_timeout_s=self.image_fetch_timeout_s,
        )


class AdminSettings(SettingsGroup):
    """Admin API.

    The admin API (`/v1/admin/`: sleep, wake, load a new version): its keys, apart from
    the scoring keys, and optionally a listener of its own."""

    # A scoring key gets 403 there, an admin key cannot score. None: the admin API
    # answers 403 to everyone.
    admin_keys: CommaSeparated = Field(default_factory=list)
    # The admin API on a listener of its own (an internal address a trainer reaches, the
    # scoring port left public): /v1/admin/ answers only there, and that listener answers
    # nothing else but /health and /ready. None: the admin API shares the scoring port.
    admin_port: int | None = Field(default=None, ge=1, le=65535)
    admin_host: str = "127.0.0.1"


class PerformanceSettings(SettingsGroup):
    """Performance.

    How the service trades start time and memory for speed: compiled forwards, the
    garbage collector, and memory given back to the system."""

    # false: no torch.compile at load unless a model's options ask for it: a start in
    # seconds, forwards somewhat slower (bench/results/design-measurements.md).
    compile: bool = True
    # Once the models have loaded, freeze what is alive out of the garbage collector's
    # full scans (service/ops/malloc_trim.py); tests in one process with many services turn it off.
    gc_freeze: bool = True
    # Return freed memory to the OS at most this often (0: never); see service/ops/malloc_trim.py.
    malloc_trim_seconds: float = Field(default=10.0, ge=0)
    # glibc: activations served from malloc's heaps, not mapped afresh per op (memory.py).
    malloc_keep_activations: bool = True


class FaultInjectionSettings(SettingsGroup):
    """Fault injection.

    Knobs for the service's own tests (Triton's QA has the same kind): left out of the
    settings reference, since a deployment has no use for them."""

    fault_load_delay_s: float = Field(
        default=0.0, ge=0, le=600, description="Seconds every admin load waits before it loads (tests of hot swap)."
    )


# Every group, in the order of the settings reference.
SETTINGS_GROUPS: tuple[type[SettingsGroup], ...] = (
    ListenerSettings,
    ModelSettings,
    TenancySettings,
    LimitSettings,
    RulePoolSettings,
    CodeSandboxSettings,
    ImageSettings,
    AdminSettings,
    PerformanceSettings,
    FaultInjectionSettings,
)


class Settings(
    ListenerSettings,
    ModelSettings,
    TenancySettings,
    LimitSettings,
    RulePoolSettings,
    CodeSandboxSettings,
    ImageSettings,
    AdminSettings,
    PerformanceSettings,
    FaultInjectionSettings,
    BaseSettings,
):
    """Every setting of the service, its groups' fields under their flat names."""

    model_config = SettingsConfigDict(env_prefix="REWARDSERVE_", extra="forbid")

    def tenant_specs(self) -> list[TenantSpec]:
        """The config file's tenants, then the tenants file's (ValueError naming the file
        and the entry when one is wrong)."""
        from rewardserve.engine.tenants import load_tenants

        specs = load_tenants(self.config, only_tenants=False) if self.config is not None else []
        if self.tenants_file is not None:
            specs += load_tenants(self.tenants_file)
        return specs

    def model_specs(self) -> list[ModelSpec]:
        """The config file's models, then the settings' own, then the built-in rules
        (a configured model of the same name replaces a built-in one)."""
        specs = list(self.models)
        if self.config is not None:
            specs = load_model_file(self.config) + specs
        names = [s.name for s in specs]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise ValueError(f"model names must be unique; repeated: {', '.join(duplicates)}")
        if self.builtin_rules:
            specs += [self.code_model(s) if s.name == "code" else s for s in BUILTIN_RULES if s.name not in names]
        return specs


# What a config file may hold at its top level (tenants: engine/tenants.py).
CONFIG_KEYS = ("models", "tenants")


def load_model_file(path: Path) -> list[ModelSpec]:
    """The ``models:`` of a config file; ValueError, one line naming the file and what
    to change, for anything else (an empty file, an unknown key, a field of a model)."""
    data = load_yaml(path)
    if data is None:
        raise ValueError(f"the config file {path} is empty: it needs a 'models:' list")
    if not isinstance(data, dict):
        raise ValueError(f"{path}: expected a mapping with a 'models:' list, got a {type(data).__name__}")
    problems = []
    for key in (str(key) for key in data if key not in CONFIG_KEYS):
        close = difflib.get_close_matches(key, CONFIG_KEYS, n=1, cutoff=0.6)
        hint = f"did you mean {close[0]!r}?" if close else "a config file holds 'models:' and 'tenants:'"
        problems.append(f"unknown top-level key {key!r}; {hint}")
    if problems:
        raise ValueError(f"{path}: " + "; ".join(problems))
    entries = data.get("models", [])
    if not isinstance(entries, list):
        got = "nothing" if entries is None else f"a {type(entries).__name__}"
        raise ValueError(f"{path}: 'models:' must be a list of models (- name: ..., source: ...), got {got}")
    specs = []
    for index, entry in enumerate(entries):
        try:
            spec = ModelSpec.model_validate(entry)
        except ValidationError as exc:
            raise ValueError(f"{path}: {describe_spec_error(entry, f'models[{index}]', exc)}") from None
        specs.append(with_function_directory(spec, path.parent))
    return specs


def with_function_directory(spec: ModelSpec, directory: Path) -> ModelSpec:
    """A rule model whose source is the operator's ``module:function``: imported from its
    config file's directory unless it names one (options.path)."""
    from rewardserve.models.rules.custom import is_custom

    function = spec.options.get("fn") or spec.source
    if spec.kind != "rule" or not is_custom(str(function)) or "path" in spec.options:
        return spec
    return spec.model_copy(update={"options": {**spec.options, "path": str(directory.resolve())}})


def parse_model_arg(arg: str, kind: str | None = None, **fields: Any) -> ModelSpec:
    """``[NAME=]SOURCE[:KIND]`` from the command line; ``kind`` (``--kind``) for the ones
    that name none, ``fields`` (``--dtype``, ``--max-tokens``, ...) for every one. A
    suffix that is not a kind stays part of the source. Without ``NAME=`` the model is
    called what vLLM would call it: a hub id or rule as given, a local directory by its
    folder's name."""
    from rewardserve.models.kinds import known_kinds

    name, sep, source = arg.partition("=")
    if not sep:
        name, source = "", arg
    if (sep and not name) or not source:
        raise ValueError(f"--model takes SOURCE, NAME=SOURCE or NAME=SOURCE:KIND, got {arg!r}")
    head, colon, tail = source.rpartition(":")
    if colon and head and tail in known_kinds():
        source, kind = head, tail
    elif colon and head and re.fullmatch(r"[A-Za-z][A-Za-z0-9_-]*", tail) and not Path(source).exists():
        # Meant as a kind (a path with ':' in it would exist): name the kinds there are.
        kinds = known_kinds()
        close = difflib.get_close_matches(tail, kinds, n=1, cutoff=0.6)
        hint = f"did you mean {close[0]!r}? " if close else ""
        raise ValueError(
            f"--model {arg}: unknown kind {tail!r}; {hint}kinds: {', '.join(kinds)} "
            f"(a local path with ':' in it must exist)"
        )
    if not name:
        local = source.startswith(("/", ".", "~")) or Path(source).expanduser().exists()
        name = Path(source).expanduser().name if local else source
    try:
        return ModelSpec(name=name, source=source, kind=kind, **fields)
    except ValidationError as exc:
        raise ValueError(f"--model {arg}: {describe_spec_error({'name': name}, '--model', exc)}") from None
