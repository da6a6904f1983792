"""Kind ``rule``: verifiable rewards computed by a registered rule function, no weights.

``source`` (or ``options.fn``) names the rule, ``options.args`` are its keyword
arguments. Each item's ``response`` (or final assistant turn) is graded against its
``reference``. Each item is a call in the service's rule pools (engine/pools/pool.py:
shared fairly between tenants, a full queue a 429), not a unit of a batcher;
``options.timeout_s`` bounds each call (default: the pools' own limit).

The rule may be the operator's own function, ``module:function`` (models/rules/custom.py:
TRL's reward-function signature), imported from ``options.path`` (default: the current
directory) or PYTHONPATH; checked when the model is built, run in the rule workers.
"""

from __future__ import annotations

import difflib
from collections import defaultdict
from typing import Any

from pydantic import Field

from rewardserve.models.batch_policy import BatchPolicy
from rewardserve.models.errors import ItemError, RequestError
from rewardserve.models.kinds import register_kind
from rewardserve.models.options import KindOptions
from rewardserve.models.plan import Job, RuleCalls, Unit, UnitOutput
from rewardserve.models.reward_model import ModelContext, RewardModel, work_key
from rewardserve.models.rules import get_rule, over_cap, rule_names, without_operator_args
from rewardserve.models.rules.custom import (
    CustomFnError,
    is_custom,
    load_function,
    prompt_text,
    search_directory,
    serve_function,
)
from rewardserve.models.rules.worker import CallFailure, RuleCall, describe_failure
from rewardserve.models.spec import ModelSpec
from rewardserve.protocol import Item, ItemResult, ScoreOptions


class RuleOptions(KindOptions):
    fn: str | None = Field(None, description="The rule function (models/rules); default: the model's source.")
    args: dict[str, Any] = Field(default_factory=dict, description="The rule's keyword arguments.")
    timeout_s: float | None = Field(None, gt=0, description="Each call's time limit (default: the pools' own).")
    path: str | None = Field(
        None,
        description="A module:function rule: the directory it is imported from, besides PYTHONPATH "
        "(default: the current directory).",
    )


@register_kind("rule")
class RuleModel(RewardModel):
    Options = RuleOptions
    options: RuleOptions
    runs_torch = False
    pooled = True
    # For ``run`` (scoring units directly, outside the service): a batch is whatever is
    # queued, many in flight, each waiting on the pool, which decides what runs next.
    default_policy = BatchPolicy(
        max_batch_tokens=64,
        max_batch_items=64,
        max_wait_ms=0.0,
        max_queue_tokens=100_000,
        pads=False,
        concurrency=16,
    )

    def __init__(self, spec: ModelSpec, preset: dict[str, Any] | None = None, context: ModelContext | None = None):
        super().__init__(spec, preset, context)
        # Named at build, with the service's other start-up problems, not when loading.
        name = self.options.fn or spec.source
        field = "options.fn" if self.options.fn else "source"
        self.fn_path: str | None = None  # a module:function's directory
        if is_custom(name):
            self.fn_path = search_directory(self.options.path)
            try:
                load_function(name, self.fn_path)
            except CustomFnError as exc:
                raise ValueError(f"model {spec.name!r} (kind rule, {field}): {exc}") from None
            serve_function(name, self.fn_path)
            return
        known = rule_names()
        if name not in known:
            close = difflib.get_close_matches(name, known, n=1, cutoff=0.6)
            hint = f"did you mean {close[0]!r}? " if close else ""
            raise ValueError(
                f"model {spec.name!r} (kind rule): unknown rule {name!r} ({field}); "
                f"{hint}known rules: {', '.join(known)}"
            )

    def load(self) -> None:
        self.rule = get_rule(self.options.fn or self.spec.source)
        self.args = dict(self.options.args)
        # What it runs on (the code rule's sandbox), checked before it serves.
        self.runs_on = self.rule.startup(self.args) if self.rule.startup is not None else None
        # The args are the model's, fixed at start: their part of every work key once.
        self._args_key = work_key([], self.rule.name, self.args)
        self.timeout_s: float | None = self.options.timeout_s
        if self.context.rules is None:
            raise RuntimeError(
                f"model {self.name!r} (kind rule) runs its calls in the engine's rule pools: build it with "
                "ModelContext(rules=RuleRunner(...)) (engine/pools/runner.py)"
            )
        self.runner: RuleCalls = self.context.rules

    @property
    def rule_name(self) -> str:
        """The rule it runs (known before it loads)."""
        return self.options.fn or self.spec.source

    @property
    def hosted_rule(self) -> str | None:
        return self.rule_name

    @property
    def operator_args(self) -> dict[str, Any]:
        """Its args that only the operator sets (the rule's operator_args): passed to each
        call apart from the request's, which never set them."""
        return {k: v for k, v in self.args.items() if k in self.rule.operator_args}

    def check_request_args(self, asked: dict[str, Any], param: str) -> None:
        """A 422 naming ``<param>.<key>`` for an arg the operator alone sets, or a value
        over the model's cap on it (its args max_timeout_s, max_memory_mb)."""
        for key in asked:
            if key in self.rule.operator_args:
                raise RequestError(
                    f"{param}.{key} is model {self.name!r}'s own setting, set by the operator; a request cannot set it",
                    param=f"{param}.{key}",
                )
        over = over_cap(asked, self.args)
        if over is not None:
            key, value, cap = over
            raise RequestError(
                f"{param}.{key} is {value}, over model {self.name!r}'s limit of {cap} (max_{key})",
                param=f"{param}.{key}",
            )

    @property
    def backend_name(self) -> str:
        return "rule" if self.runs_on is None else f"rule in {self.runs_on}"

    def _request_args(self, options: ScoreOptions) -> tuple[dict[str, Any], Any]:
        """The rule's arguments for this request, and their part of the work key: the
        model's, with the request's own (``options.code``) over them for a rule that
        takes them."""
        if options.code is None:
            return self.args, self._args_key
        if self.rule.request_options != "code":
            raise RequestError(
                f"options.code is for the code model; model {self.name!r} runs rule {self.rule.name!r}",
                param="options.code",
            )
        asked = options.code.model_dump(exclude_none=True)
        self.check_request_args(asked, "options.code")
        args = {**self.args, **asked}
        return args, work_key([], self.rule.name, args)

    def prepare(self, items: list[Item], options: ScoreOptions) -> list[Job[RuleCall] | ItemError]:
        entries: list[Job[RuleCall] | ItemError] = []
        args, args_key = self._request_args(options)
        # The same for every item: the request's part and the operator's, apart.
        request_args, operator_args = without_operator_args(self.rule, args), self.operator_args
        for index, item in enumerate(items):
            response = item.response_text()
            problem = self.rule.check(response, item.reference, args)
            if problem is not None:
                where = f"items[{index}].{problem.field}"
                raise RequestError(f"{where}: {problem.message}", param=where, type=problem.error_type)
            if self.fn_path is None:
                call = RuleCall(
                    self.rule.name,
                    response,
                    item.reference,
                    request_args,
                    timeout_s=self.timeout_s,
                    operator_args=operator_args,
                )
                key = work_key([], args_key, response, item.reference)
            else:  # the function also sees the prompt and the metadata: both in its key
                prompt = prompt_text(item)
                call = RuleCall(
                    self.rule.name,
                    response,
                    item.reference,
                    self.args,
                    timeout_s=self.timeout_s,
                    path=self.fn_path,
                    prompt=prompt,
                    metadata=item.metadata,
                )
                key = work_key([], self._args_key, response, item.reference, prompt, item.metadata)
            entries.append(Job(length=1, payload=call, key=key))
        return entries

    def run(self, units: list[Unit[Job[RuleCall]]]) -> list[UnitOutput]:
        # One pool call per request, so the pools share fairly between requests.
        by_request: dict[int, list[int]] = defaultdict(list)
        for index, unit in enumerate(units):
            by_request[unit.scope.id if unit.scope is not None else 0].append(index)
        runs = [
            (
                indices,
                self.runner.run(
                    [units[i].payload.payload for i in indices], units[indices[0]].scope, timeout_s=self.timeout_s
                ),
            )
            for indices in by_request.values()
        ]
        results: list[UnitOutput] = [[ItemError("not run")] for _ in units]
        for indices, future in runs:
            for index, value in zip(indices, future.result()):
                results[index] = [self.call_result(value)]
        return results

    def call_result(self, value: Any) -> ItemResult | ItemError:
        if isinstance(value, CallFailure):
            return ItemError(describe_failure(value, f"rule {self.rule.name!r}"))
        tests = getattr(value, "tests", None)  # a code rule's verdicts per test
        return ItemResult(score=float(value), tests=tests)

    def probe(self) -> None:
        """One call through the pool proves it serves; the rule may find the probe item
        beneath it (no reference, say), but must answer."""
        (job,) = self.prepare([Item(prompt="1+1?", response="2", reference="2")], ScoreOptions())
        assert isinstance(job, Job)
        (value,) = self.runner.run([job.payload], timeout_s=self.timeout_s).result()
        # The operator's own function may raise on the probe item (no metadata column):
        # the pool answered all the same.
        answered = ("rule", "error") if self.fn_path is not None else ("rule",)
        if isinstance(value, CallFailure) and value.kind not in answered:
            raise RuntimeError(f"probe failed: {describe_failure(value, f'rule {self.rule.name!r}')}")

    def close(self) -> None:
        """Nothing of its own: the pools are the engine's, closed with it."""
