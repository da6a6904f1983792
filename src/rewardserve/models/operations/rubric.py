"""Rubric rewards: each item is graded by weighted criteria, rules or judge questions,
and the criterion scores are aggregated into the item's reward.

The plan: request checks, the rule calls of each item (run in the rule pools), the
judge questions' texts (templates rendered under limits, models/text/templating.py; those
that need the pool render there first, a stage of their own), one judge unit per item
(a verifier model's, ``VerifierModel.plan_judge``: the item's context runs once for all
its questions), and the aggregation of criterion scores into each item's reward.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, cast, runtime_checkable

from pydantic import ValidationError

from rewardserve.models.errors import ItemError, RequestError
from rewardserve.models.operations import Cost, Lent, Operation
from rewardserve.models.operations.formula import FormulaError, compile_formula, evaluate
from rewardserve.models.operations.mixing import Scaled, escalate, plan_model_criteria, scale_outcomes
from rewardserve.models.plan import PeerLookup, Plan, Unit, UnitOutput
from rewardserve.models.rules import Rule, get_rule, with_named_reference, without_operator_args
from rewardserve.models.rules.custom import is_custom, prompt_text, served_directory
from rewardserve.models.rules.worker import CallFailure, RenderCall, RuleCall, describe_failure
from rewardserve.models.text.judge_templates import item_variables
from rewardserve.models.text.templating import (
    TemplateLimitError,
    all_plain,
    check_syntax,
    has_template,
    render_field,
)
from rewardserve.protocol import (
    Aggregation,
    CodeOptions,
    Criterion,
    CriterionResult,
    Item,
    RubricRequest,
    RubricResult,
)

if TYPE_CHECKING:
    from rewardserve.models.reward_model import RewardModel

Key = tuple[int, int]  # (item index, criterion index)
# A criterion's outcome: its score (or why it has none) and the judge's verdict.
CriterionOutcome = tuple[Any, "str | None"]


def response_with_tool_calls(item: Item) -> str:
    """The graded text; an assistant turn's own tool calls appended as ``<tool_call>``
    blocks, so tool-call rules see them."""
    text = item.response_text()
    if item.messages:
        last = next((m for m in reversed(item.messages) if m.role == "assistant"), None)
        for call in (last.tool_calls or []) if last else []:
            args = call.function.arguments
            try:
                args = json.loads(args) if isinstance(args, str) and args.strip() else (args or {})
            except ValueError:
                pass  # kept as the string the model wrote
            text += f"\n<tool_call>{json.dumps({'name': call.function.name, 'arguments': args})}</tool_call>"
    return text


def check_criteria(criteria: list[Criterion], aggregation: Aggregation, param: str) -> None:
    """Request-time checks: unique names, known rules, templates that parse, a safe
    formula (422 otherwise)."""
    names = [c.name for c in criteria]
    if not criteria:
        raise RequestError("an item needs at least one criterion", param=param)
    if len(set(names)) != len(names):
        raise RequestError("criterion names must be unique", param=param)
    for index, criterion in enumerate(criteria):
        if criterion.fn is not None and is_custom(criterion.fn):  # the operator's own function
            if served_directory(criterion.fn) is None:
                raise RequestError(
                    f"criterion {criterion.name!r}: {criterion.fn!r} is not a reward function this service "
                    "serves; the operator serves one as a rule model (kind: rule, source: module:function)",
                    param=f"{param}[{index}].fn",
                )
        elif criterion.fn is not None:
            try:
                rule = get_rule(criterion.fn)
            except KeyError as exc:
                raise RequestError(str(exc.args[0]), param=f"{param}[{index}].fn") from exc
            operator = sorted(set(criterion.args) & rule.operator_args)
            if operator:
                raise RequestError(
                    f"criterion {criterion.name!r}: args.{operator[0]} is the served model's own setting, set "
                    f"by the operator; a request cannot set it ({criterion.fn})",
                    param=f"{param}[{index}].args.{operator[0]}",
                )
        if criterion.choices is not None and len(set(criterion.choices)) != len(criterion.choices):
            raise RequestError("a criterion's choices must differ", param=f"{param}[{index}].choices")
        if criterion.model is not None:
            continue
        where = "args" if criterion.fn is not None else "text"
        try:
            check_syntax(criterion.args if criterion.fn is not None else criterion.text)
        except TemplateLimitError as exc:
            raise RequestError(str(exc), param=f"{param}[{index}].{where}") from exc
    if aggregation.mode == "formula":
        try:
            compile_formula(aggregation.formula or "", set(names))
        except FormulaError as exc:
            raise RequestError(str(exc), param="aggregation.formula") from exc
    if aggregation.mode in ("weighted_mean", "threshold") and sum(c.weight for c in criteria) <= 0:
        raise RequestError("the criteria's weights sum to 0", param=param)


@dataclass
class CriteriaPlan:
    """What one request's criteria need computed: rule calls (keyed by item and
    criterion), judge texts ready now, and judge texts to render in the pool."""

    rule_keys: list[Key] = field(default_factory=list)
    rule_calls: list[RuleCall] = field(default_factory=list)
    render_keys: list[Key] = field(default_factory=list)
    render_calls: list[RenderCall] = field(default_factory=list)
    texts: dict[Key, str] = field(default_factory=dict)
    failed: dict[Key, ItemError] = field(default_factory=dict)


@runtime_checkable
class ServedRule(Protocol):
    """A served rule model (models/kinds/rule.py) as the criteria of a rule it hosts run
    on it: its args, its operator's args and its call time limit."""

    name: str
    args: dict[str, Any]
    timeout_s: float | None

    @property
    def rule_name(self) -> str: ...

    @property
    def operator_args(self) -> dict[str, Any]: ...

    def check_request_args(self, asked: dict[str, Any], param: str) -> None: ...


def criterion_param(criterion: Criterion, param: str, index: int) -> str:
    """The field a rule criterion came from: its ``fn``, or ``python`` for a grader."""
    return f"{param}[{index}].{'python' if criterion.fn == 'python_grader' else 'fn'}"


def hosted_rules(body: RubricRequest) -> set[str]:
    """The rules whose served model a rubric's criteria run on (``served_by``: the code
    model for code_tests and python criteria), known before anything is planned."""
    own = [item.criteria for item in body.items if item.criteria is not None]
    hosts = set()
    for criteria in [body.criteria or [], *own]:
        for criterion in criteria:
            if criterion.fn is None or is_custom(criterion.fn):
                continue
            try:
                host = get_rule(criterion.fn).served_by
            except KeyError:  # refused, naming it, when the rubric is checked
                continue
            if host is not None:
                hosts.add(host)
    return hosts


def host_models(checked: CheckedRubric, hosts: dict[str, str], peers: PeerLookup | None) -> dict[str, ServedRule]:
    """The served model each hosted rule's criteria run on (by the rule it hosts), with
    the criteria's args checked against it: a 422 naming why where none is served, for an
    arg it does not take, or for a value over its caps."""
    found: dict[str, ServedRule] = {}
    seen: set[int] = set()
    for own, param in zip(checked.criteria, checked.params):
        if id(own) in seen:  # the request's shared criteria: checked once
            continue
        seen.add(id(own))
        for index, criterion in enumerate(own):
            if criterion.fn is None or is_custom(criterion.fn):
                continue
            rule = get_rule(criterion.fn)
            if rule.served_by is None:
                continue
            where = criterion_param(criterion, param, index)
            if rule.served_by not in hosts or peers is None:
                raise RequestError(
                    f"criterion {criterion.name!r}: no code model is served; {criterion.fn} criteria run code "
                    "only on the operator's code model (its sandbox and limits), and this service serves none",
                    param=where,
                )
            host = found.get(rule.served_by)
            if host is None:
                model = peers(hosts[rule.served_by], where).model
                assert isinstance(model, ServedRule), f"{model.name} hosts {rule.served_by} and is no rule model"
                host = found[rule.served_by] = model
            check_hosted_args(rule, criterion, host, f"{param}[{index}].args")
    return found


def check_hosted_args(rule: Rule, criterion: Criterion, host: ServedRule, where: str) -> None:
    """A hosted criterion's args as the model checks a request's own (``options.code``):
    typed where the rule takes them, within the model's caps. Templated values are the
    item's, typed in the worker and held to the caps by the rule itself."""
    plain = {k: v for k, v in criterion.args.items() if k != "reference" and not has_template(v)}
    if rule.request_options == "code":
        unknown = sorted(set(criterion.args) - set(CodeOptions.model_fields) - {"reference"})
        if unknown:
            raise RequestError(
                f"criterion {criterion.name!r}: {criterion.fn} takes no argument {unknown[0]!r}; it takes "
                f"{', '.join(sorted(CodeOptions.model_fields))} and reference",
                param=f"{where}.{unknown[0]}",
            )
        try:
            CodeOptions.model_validate(plain)
        except ValidationError as exc:
            error = exc.errors()[0]
            field = ".".join(str(part) for part in error["loc"])
            raise RequestError(
                f"criterion {criterion.name!r}: args.{field}: {error['msg']}", param=f"{where}.{field}"
            ) from None
    host.check_request_args(plain, where)


def hosted_call_args(rule: Rule, args: dict[str, Any], host: ServedRule) -> dict[str, Any]:
    """A hosted criterion's args: the model's own (for the rule it runs itself) with the
    criterion's over them, the operator's apart (RuleCall.operator_args)."""
    base = without_operator_args(rule, host.args) if host.rule_name == rule.name else {}
    return {**base, **args}


def plan_criteria(
    items: Sequence[Item],
    criteria: list[list[Criterion]],
    params: list[str],
    hosts: dict[str, ServedRule] | None = None,
) -> CriteriaPlan:
    """Rule calls with their args rendered (plain templates here, others in the
    worker), and each judge criterion's text. RequestError (413 / 422) for an input over
    a rule's cap or a template over its limits, naming the field. ``hosts``: the served
    model each hosted rule runs on (host_models)."""
    plan = CriteriaPlan()
    hosts = hosts or {}
    templated: dict[int, bool] = {}  # by id: the request's criteria are shared by its items

    def has_template_once(source: Any) -> bool:
        found = templated.get(id(source))
        if found is None:
            found = templated[id(source)] = has_template(source)
        return found

    for i, (item, own, param) in enumerate(zip(items, criteria, params)):
        if item.rendered is not None:
            raise RequestError(
                f"items[{i}].{item.rendered}: rubric criteria read the response; send "
                "'messages' or 'prompt' + 'response'",
                param=f"items[{i}].{item.rendered}",
            )
        response = response_with_tool_calls(item)
        variables: dict[str, Any] | None = None
        for k, criterion in enumerate(own):
            if criterion.model is not None:  # scored by the model (models/operations/mixing.py)
                continue
            # A rule's args (a dict), else the judge question's text (a criterion has one of them).
            source: Any
            key, source = (i, k), criterion.args if criterion.fn is not None else criterion.text
            where = f"{param}[{k}].{'args' if criterion.fn is not None else 'text'}"
            templates = has_template_once(source)
            if templates and variables is None:
                variables = item_variables(item)
            try:
                if templates and all_plain(source):
                    source = render_field(source, variables or {})
                    pooled = False
                else:
                    pooled = templates
            except ItemError as exc:
                plan.failed[key] = exc
                continue
            except TemplateLimitError as exc:
                raise RequestError(str(exc), param=where) from exc
            if criterion.fn is None:
                if pooled:
                    plan.render_keys.append(key)
                    plan.render_calls.append(RenderCall(source, variables or {}))
                else:
                    plan.texts[key] = source
                continue
            reference = item.reference
            if not pooled:
                reference, source = with_named_reference(reference, source)
                check_rule_input(criterion.fn, response, reference, source, i)
            plan.rule_keys.append(key)
            if is_custom(criterion.fn):  # the operator's own function: the prompt and metadata too
                call = RuleCall(
                    criterion.fn,
                    response,
                    reference,
                    source,
                    variables if pooled else None,
                    path=served_directory(criterion.fn),
                    prompt=prompt_text(item),
                    metadata=item.metadata,
                )
            else:
                rule = get_rule(criterion.fn)
                host = hosts.get(rule.served_by) if rule.served_by is not None else None
                if host is None:
                    call = RuleCall(criterion.fn, response, reference, source, variables if pooled else None)
                else:  # on the served model: its args, its operator's, its time limit
                    call = RuleCall(
                        criterion.fn,
                        response,
                        reference,
                        hosted_call_args(rule, source, host),
                        variables if pooled else None,
                        timeout_s=host.timeout_s,
                        operator_args={k: v for k, v in host.operator_args.items() if k in rule.operator_args},
                    )
            plan.rule_calls.append(call)
    return plan


def check_rule_input(rule: str, response: str, reference: Any, args: dict[str, Any], index: int) -> None:
    """413 (422 for a count) naming ``items[i].<field>`` for an input over the rule's caps."""
    problem = get_rule(rule).check(response, reference, args)
    if problem is not None:
        where = f"items[{index}].{problem.field}"
        raise RequestError(f"{where}: {problem.message} ({rule})", param=where, type=problem.error_type)


def call_outcome(key: Key, value: Any, rule: str | None, where: str) -> Any:
    """A pool call's value, or the item's error; RequestError when the failure is the
    request's (a template over its limits, an input over a cap found after rendering)."""
    if not isinstance(value, CallFailure):
        return value
    if value.kind == "template":
        raise RequestError(value.message, param=where)
    if value.kind == "limit":
        raise RequestError(f"items[{key[0]}]: {value.message}", param=f"items[{key[0]}]", type="payload_too_large")
    subject = f"rule {rule!r}" if rule else "the template"
    return ItemError(describe_failure(value, subject))


def criterion_result(criterion: Criterion, scaled: Scaled) -> CriterionResult:
    if isinstance(scaled.score, ItemError):
        return CriterionResult(
            name=criterion.name, valid=False, error=str(scaled.score), reason=scaled.reason, weight=criterion.weight
        )
    return CriterionResult(
        name=criterion.name,
        score=scaled.score,
        reason=scaled.reason,
        weight=criterion.weight,
        raw=scaled.raw,
        running_count=scaled.running_count,
    )


def aggregate(criteria: list[Criterion], results: list[CriterionResult], aggregation: Aggregation) -> float:
    """The item's reward from valid criterion scores (the caller checks validity)."""
    scores = {r.name: cast(float, r.score) for r in results}  # valid results: each has its score
    if aggregation.mode == "all":
        return float(all(scores[c.name] >= c.pass_threshold for c in criteria))
    if aggregation.mode == "any":
        return float(any(scores[c.name] >= c.pass_threshold for c in criteria))
    if aggregation.mode == "formula":
        formula = cast(str, aggregation.formula)  # Aggregation requires one in formula mode
        return evaluate(compile_formula(formula, set(scores)), scores)
    total = sum(c.weight for c in criteria)
    mean = sum(c.weight * scores[c.name] for c in criteria) / total
    if aggregation.mode == "threshold":
        return float(mean >= aggregation.threshold)
    return mean


# --------------------------------------------------------------------------- the plan


@runtime_checkable
class Judge(Protocol):
    """A model that answers rubric judge questions (endpoint "judge")."""

    def plan_judge(
        self,
        items: list[Item],
        criteria: list[list[Criterion]],
        params: list[str],
        texts: dict[Key, Any],
        template: str | None,
    ) -> tuple[list[Unit[Any]], Callable[[list[UnitOutput]], dict[Key, CriterionOutcome]], int]:
        """Judge units (one per item), how their outputs become criterion outcomes, and
        the prompt tokens they hold."""
        ...


@dataclass
class CheckedRubric:
    """Each item's criteria (its own, or the request's) and the field that holds them."""

    criteria: list[list[Criterion]]
    params: list[str]

    @property
    def needs_judge(self) -> bool:
        return any(c.text is not None for own in self.criteria for c in own)


def asks_judge(body: RubricRequest) -> bool:
    """Whether any criterion of the request is a judge question (no template parsed)."""
    own = [item.criteria for item in body.items if item.criteria is not None]
    return any(c.text is not None for criteria in [body.criteria or [], *own] for c in criteria)


def check_rubric(body: RubricRequest) -> CheckedRubric:
    """Each item's criteria, checked (422 naming the field otherwise)."""
    criteria, params = [], []
    shared_checked = False
    for index, item in enumerate(body.items):
        own = item.criteria if item.criteria is not None else body.criteria
        param = f"items[{index}].criteria" if item.criteria is not None else "criteria"
        if own is None:
            raise RequestError("no criteria: give 'criteria' for the request or the item", param=param)
        if item.criteria is not None or not shared_checked:  # the request's own, once
            check_criteria(own, body.aggregation, param)
            shared_checked = shared_checked or item.criteria is None
        criteria.append(own)
        params.append(param)
    return CheckedRubric(criteria, params)


def rubric_models(body: RubricRequest) -> set[str]:
    """The served models a rubric's criteria and escalation name."""
    own = [item.criteria for item in body.items if item.criteria is not None]
    names = {c.model for criteria in [body.criteria or [], *own] for c in criteria if c.model is not None}
    return names | ({body.escalate.to} if body.escalate is not None else set())


def rubric_work(body: RubricRequest) -> int:
    """The criteria the request asks scored, all items together (its rule calls, judge
    questions and model scores): known before anything is planned."""
    shared = len(body.criteria or [])
    return sum(len(item.criteria) if item.criteria is not None else shared for item in body.items)


def rubric_rule_calls(body: RubricRequest) -> dict[str, int]:
    """The rule calls a rubric makes, by rule: known before anything is planned."""
    calls: dict[str, int] = {}
    shared = [c.fn for c in body.criteria or [] if c.fn is not None]
    for item in body.items:
        fns = shared if item.criteria is None else [c.fn for c in item.criteria if c.fn is not None]
        for fn in fns:
            calls[fn] = calls.get(fn, 0) + 1
    return calls


def plan_rubric(
    body: RubricRequest,
    model: RewardModel | None,
    peers: PeerLookup | None = None,
    hosts: dict[str, str] | None = None,
) -> Plan[RubricResult]:
    """The criteria checked (their templates parsed: off the event loop, as all
    planning is); rule calls, pool-rendered texts and model criteria (parts on their
    models) first; then the judge units (with the rule calls, when nothing had to be
    rendered); then each item's aggregate, and the escalation stage when one is asked for.
    ``hosts``: the served model (lent in ``peers``) of each rule that hosts criteria
    (hosted_rules: the code model), none when absent."""
    checked = check_rubric(body)
    judge = model if isinstance(model, Judge) else None
    hosted = host_models(checked, hosts or {}, peers)
    work = plan_criteria(body.items, checked.criteria, checked.params, hosted)
    models = plan_model_criteria(body.items, checked.criteria, checked.params, peers)
    outcomes: dict[Key, CriterionOutcome] = {key: (error, None) for key, error in work.failed.items()}

    def take_rules(values: list[Any]) -> None:
        for key, value in zip(work.rule_keys, values):
            criterion = checked.criteria[key[0]][key[1]]
            where = f"{checked.params[key[0]]}[{key[1]}].args"
            outcomes[key] = (call_outcome(key, value, criterion.fn, where), getattr(value, "reason", None))

    def judging(texts: dict[Key, Any], rule_calls: list[Any]) -> Plan[RubricResult]:
        units: list[Unit[Any]]
        judged: Callable[[list[UnitOutput]], dict[Key, CriterionOutcome]]
        prompt_tokens: int
        if judge is not None and checked.needs_judge:
            units, judged, prompt_tokens = judge.plan_judge(
                body.items, checked.criteria, checked.params, texts, body.judge_template
            )
        else:
            units, judged, prompt_tokens = [], (lambda _outputs: {}), 0

        def finish(outputs: list[UnitOutput], values: list[Any]) -> list[RubricResult] | Plan[RubricResult]:
            take_rules(values)
            outcomes.update(judged(outputs))
            outcomes.update({key: (value, None) for key, value in models.outcomes().items()})
            scaled = scale_outcomes(body.items, checked.criteria, outcomes, models.running)
            results = [
                _item_result(
                    item, own, [criterion_result(c, scaled[(i, k)]) for k, c in enumerate(own)], body.aggregation
                )
                for i, (item, own) in enumerate(zip(body.items, checked.criteria))
            ]
            return escalate(body.escalate, list(body.items), results, peers)

        return Plan(units=units, finish=finish, calls=rule_calls, prompt_tokens=prompt_tokens)

    if not work.render_calls:
        first = judging(dict(work.texts), list(work.rule_calls))
        first.parts = list(models.parts)
        return first
    n_rules = len(work.rule_calls)

    def rendered(_outputs: list[UnitOutput], values: list[Any]) -> Plan[RubricResult]:
        take_rules(values[:n_rules])
        texts: dict[Key, Any] = dict(work.texts)
        for key, value in zip(work.render_keys, values[n_rules:]):
            texts[key] = call_outcome(key, value, None, f"{checked.params[key[0]]}[{key[1]}].text")
        return judging(texts, [])

    return Plan(units=[], finish=rendered, calls=[*work.rule_calls, *work.render_calls], parts=list(models.parts))


def _item_result(
    item: Item, criteria: list[Criterion], per: list[CriterionResult], aggregation: Aggregation
) -> RubricResult:
    components = {r.name: r.score for r in per}
    bad = [r.name for r in per if not r.valid]
    if bad:
        return RubricResult(
            id=item.id,
            valid=False,
            score=None,
            criteria=per,
            components=components,
            error=f"criteria could not be scored: {', '.join(bad)}",
        )
    try:
        score = aggregate(criteria, per, aggregation)
    except ValueError as exc:
        return RubricResult(id=item.id, valid=False, score=None, criteria=per, components=components, error=str(exc))
    return RubricResult(id=item.id, score=score, criteria=per, components=components)


class RubricOperation:
    """/v1/rubric: weighted criteria per item, on rules, a judge and served models."""

    def cost(self, body: RubricRequest) -> Cost:
        return Cost(
            items=len(body.items),
            work=rubric_work(body),
            rule_calls=rubric_rule_calls(body),
            models=frozenset(rubric_models(body)),
            hosted=frozenset(hosted_rules(body)),
            judge=asks_judge(body),
        )

    def plan(self, body: RubricRequest, lent: Lent) -> Plan[RubricResult]:
        return plan_rubric(body, lent.judge, lent.peers, lent.hosts)


RUBRIC: Operation[RubricRequest, RubricResult] = RubricOperation()
