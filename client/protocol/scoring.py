"""The scoring routes' bodies: /v1/score, /v1/score/steps, /v1/verify, /v1/rubric,
/v1/compare."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, model_validator

from rewardserve.client.protocol.common import (
    CodeArgs,
    GoalOptions,
    Item,
    ItemResult,
    JSONValue,
    Message,
    ScoreOptions,
    Usage,
    _Request,
    _Response,
)

# --------------------------------------------------------------------------- /v1/score


class ScoreRequest(_Request):
    model: str
    items: list[Item] = Field(min_length=1)
    options: ScoreOptions = Field(default_factory=ScoreOptions)


def components_by_name(results: list[ItemResult]) -> dict[str, list[float | None]]:
    """Each component's scores in item order (None: invalid, or not part of that item)."""
    names = list(dict.fromkeys(name for r in results for name in (r.components or {})))
    return {name: [(r.components or {}).get(name) for r in results] for name in names}


class ScoreResponse(_Response):
    model: str
    # The hub revision the model was pinned to (its config's `revision`), when it has one.
    revision: str | None = None
    # The version that scored every result here (the config's `version`, or the one an
    # admin load named): a trainer can drop scores of a version it has moved past.
    model_version: str | None = None
    results: list[ItemResult]
    usage: Usage = Field(default_factory=Usage)
    # What the service noticed about the request that changes what the scores mean
    # (group normalization that saw no groups).
    warnings: list[str] = Field(default_factory=list)

    def components(self) -> dict[str, list[float | None]]:
        """An ensemble's members' scores, by member, in item order."""
        return components_by_name(list(self.results))


# --------------------------------------------------------------------------- /v1/score/steps

StepsFrom = Literal["auto", "steps", "separator", "turns"]
Aggregate = Literal["min", "prod", "mean", "last", "sum"]
Shaping = Literal["none", "raw", "delta", "potential", "group"]


class StepOptions(GoalOptions):
    """How steps are found, aggregated and shaped.

    steps_from: ``steps`` (the item's list), ``separator`` (split the final assistant
    message on ``separator``), ``turns`` (each assistant turn of ``messages`` is a step;
    tool calls and tool results stay as context), or ``auto``: the list if given, else
    turns when the conversation has several assistant turns or tool calls, else the
    separator (the request's, or the model's own), else the whole response as one step.
    """

    steps_from: StepsFrom = "auto"
    separator: str | None = Field(default=None, min_length=1)
    aggregate: Aggregate | None = None  # None: the model preset's aggregate
    threshold: float | None = None  # first_error_step = first step scoring below it
    # raw: step_rewards = step_scores; delta: s_t - s_(t-1) (s_(-1) = 0, so they sum to
    # the last score); potential: gamma * s_t - s_(t-1), with s_(-1) = 0 and the last
    # step's s_t (the end's potential) 0, so that their discounted sum is 0 and, added to
    # an outcome reward, they cannot change which policy is best (Ng et al. 1999);
    # group: GRPO process advantages over each group_id's steps.
    shaping: Shaping = "none"
    gamma: float = Field(default=1.0, ge=0.0, le=1.0)  # of shaping: potential
    # "steps": a trajectory longer than the model's context is scored up to the last
    # step that fits, the rest reported unscored; "error": 413 instead.
    truncate: Literal["steps", "error"] = "steps"
    # clip_goal frames: each step reward is the mean over the last `window` frames.
    window: int | None = Field(default=None, ge=1, le=1000)
    # A tokenizer the service was started with (its setting policy_tokenizers), named:
    # each item's response_token_ids get token_rewards, its step rewards (step_rewards
    # when shaped, else step_scores) on the last token overlapping each step ("last"),
    # or shared among every one ("uniform"), as rewardserve.client.token_rewards does.
    policy_tokenizer: str | None = Field(default=None, max_length=200)
    token_spread: Literal["last", "uniform"] = "last"


class StepSpan(_Response):
    """Where a step is in what the client sent: ``message`` indexes ``messages`` (None
    for ``response``, and for ``steps`` lists, whose offsets run over the steps
    concatenated), ``start``/``end`` are character offsets in that text."""

    message: int | None = None
    start: int
    end: int


class StepsResult(ItemResult):
    step_scores: list[float | None] = Field(default_factory=list)  # None: not scored
    steps_scored: int = 0
    aggregates: dict[str, float] | None = None  # min, prod, mean, last, sum (scored steps)
    first_error_step: int | None = None
    spans: list[StepSpan] = Field(default_factory=list)
    step_rewards: list[float | None] | None = None  # per options.shaping
    token_rewards: list[float] | None = None  # per options.policy_tokenizer


class StepsRequest(_Request):
    model: str
    items: list[Item] = Field(min_length=1)
    options: StepOptions = Field(default_factory=StepOptions)


class StepsResponse(_Response):
    model: str
    # The hub revision the model was pinned to (its config's `revision`), when it has one.
    revision: str | None = None
    # The version that scored every result here (the config's `version`, or the one an
    # admin load named): a trainer can drop scores of a version it has moved past.
    model_version: str | None = None
    results: list[StepsResult]
    usage: Usage = Field(default_factory=Usage)
    # As ScoreResponse's: group normalization or shaping that saw no groups.
    warnings: list[str] = Field(default_factory=list)


# --------------------------------------------------------------------------- /v1/verify


class SamplingOptions(_Request):
    """Generate mode: transformers ``generate`` parameters; ``n`` samples are averaged."""

    temperature: float = Field(default=0.0, ge=0.0, le=5.0)
    top_p: float = Field(default=1.0, gt=0.0, le=1.0)
    max_new_tokens: int = Field(default=256, ge=1, le=4096)
    n: int = Field(default=1, ge=1, le=16)
    seed: int | None = Field(default=None, ge=0, le=2**63 - 1)


class VerifyOptions(SamplingOptions):
    """``logprob``: ONE forward pass with the verdict slot prefilled; score = the
    template's choices' probabilities (P(yes) for yes/no) weighted by their values.
    ``generate``: sample a rationale, parse the verdict; unparsable = invalid."""

    mode: Literal["logprob", "generate"] = "logprob"
    template: str | None = None  # None: the model's default
    variables: CodeArgs = Field(default_factory=dict)  # extra template fields


class VerifySample(_Response):
    text: str
    score: float | None = None
    verdict: str | None = None


class VerifyResult(ItemResult):
    verdict: str | None = None
    rationale: str | None = None
    probabilities: dict[str, float] | None = None  # logprob: per choice
    samples: list[VerifySample] | None = None  # generate: every sample


class VerifyRequest(_Request):
    model: str
    items: list[Item] = Field(min_length=1)
    options: VerifyOptions = Field(default_factory=VerifyOptions)


class VerifyResponse(_Response):
    model: str
    # The hub revision the model was pinned to (its config's `revision`), when it has one.
    revision: str | None = None
    # The version that scored every result here (the config's `version`, or the one an
    # admin load named): a trainer can drop scores of a version it has moved past.
    model_version: str | None = None
    results: list[VerifyResult]
    usage: Usage = Field(default_factory=Usage)


# --------------------------------------------------------------------------- /v1/rubric


# How a score is put on a common scale before it is mixed: as given, through a sigmoid,
# z-scored within the item's group_id, or against the model's running mean and std.
Scale = Literal["none", "sigmoid", "group", "running"]


class Criterion(_Request):
    """A rule (``fn`` + ``args``), a judge question (``text``) or a served model's score
    (``model``: any model answering /v1/score). ``args`` and ``text`` may read the item
    with ``{{ item.reference.answer }}``-style fields. ``normalize`` puts the score on a
    common scale (``running``: model criteria only). ``polarity: negative`` reads a score
    in [0, 1] (a rule's, a judge's, a sigmoid's) as 1 - score, any other as -score."""

    name: str = Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$", max_length=64)
    weight: float = Field(default=1.0, ge=0.0)
    fn: str | None = None
    args: CodeArgs = Field(default_factory=dict)
    text: str | None = Field(default=None, max_length=4000)
    model: str | None = Field(default=None, max_length=128)
    # A grader written in the request, run in the code model's sandbox: Python source
    # defining ``grade(sample, item) -> float`` (OpenAI's python grader), where sample is
    # {"output_text": the response} and item {"reference": the item's reference}. Like
    # any criterion's args, ``{{ }}`` in it reads the item.
    python: str | None = Field(default=None, max_length=100_000)
    normalize: Scale = "none"
    choices: list[Annotated[str, Field(min_length=1, max_length=200)]] | None = Field(
        default=None, min_length=2, max_length=10
    )  # best first
    polarity: Literal["positive", "negative"] = "positive"
    pass_threshold: float = 0.5  # for all / any pass

    @model_validator(mode="after")
    def _one_source(self) -> Criterion:
        if sum(x is not None for x in (self.fn, self.text, self.model, self.python)) != 1:
            raise ValueError(
                "a criterion has exactly one of 'fn' (a rule), 'text' (a judge question), "
                "'model' (a served model's score) or 'python' (a grader run in a sandbox)"
            )
        if self.python is not None:  # the python_grader rule (models/rules/code.py) runs it
            self.fn, self.args, self.python = "python_grader", {**self.args, "source": self.python}, None
        if self.normalize == "running" and self.model is None:
            raise ValueError("normalize 'running' keeps statistics per served model: model criteria only")
        return self

    @property
    def unit_scale(self) -> bool:
        """Whether the score it is aggregated at lies in [0, 1]."""
        return self.normalize == "sigmoid" or (self.model is None and self.normalize == "none")


class EscalateWhen(_Request):
    """When an item's cheap score is not enough: any condition that holds escalates it."""

    uncertainty_above: float | None = Field(default=None, ge=0)  # ensembles: members disagree
    margin_below: float | None = Field(default=None, ge=0)  # |score - threshold| is small
    threshold: float = 0.5  # what margin_below measures from
    group_zero_variance: bool = False  # a GRPO group scored all alike teaches nothing
    invalid: bool = False  # the cheap score could not be computed


class Escalation(_Request):
    """Ask ``to`` (a served model; a verifier answers with P(yes)) for the items ``when``
    picks, at most ``max_fraction`` of the request's items; its score, on ``normalize``'s
    scale, replaces the cheap one."""

    to: str = Field(max_length=128)
    when: EscalateWhen
    max_fraction: float = Field(default=1.0, ge=0, le=1)
    normalize: Literal["none", "sigmoid", "running"] = "none"


class RubricItem(Item):
    criteria: list[Criterion] | None = Field(default=None, max_length=64)


class Aggregation(_Request):
    mode: Literal["weighted_mean", "all", "any", "threshold", "formula"] = "weighted_mean"
    threshold: float = 0.5  # mode threshold: 1 when the weighted mean reaches it
    formula: str | None = Field(default=None, max_length=2000)  # over criterion names

    @model_validator(mode="after")
    def _formula_given(self) -> Aggregation:
        if self.mode == "formula" and not self.formula:
            raise ValueError("mode 'formula' needs a 'formula'")
        return self


class RubricRequest(_Request):
    judge: str | None = None  # the verifier model answering judge criteria
    items: list[RubricItem] = Field(min_length=1)
    criteria: list[Criterion] | None = Field(default=None, max_length=64)  # for items without their own
    aggregation: Aggregation = Field(default_factory=Aggregation)
    judge_template: str = "criterion"
    escalate: Escalation | None = None


class CriterionResult(_Response):
    name: str
    score: float | None = None  # as aggregated: normalised, polarity applied
    valid: bool = True
    error: str | None = None
    reason: str | None = None
    weight: float = 1.0
    raw: float | None = None  # as the rule, judge or model gave it
    # normalize running: how many scores the model's statistics held (below 100 they are
    # still settling).
    running_count: int | None = None


class RubricResult(ItemResult):
    criteria: list[CriterionResult] = Field(default_factory=list)


class RubricResponse(_Response):
    judge: str | None = None
    results: list[RubricResult]
    usage: Usage = Field(default_factory=Usage)
    warnings: list[str] = Field(default_factory=list)

    def components(self) -> dict[str, list[float | None]]:
        """Each criterion's scores as aggregated, by name, in item order."""
        return components_by_name(list(self.results))


# --------------------------------------------------------------------------- /v1/compare


class CompareItem(_Request):
    id: str | None = None
    prompt: str | list[Message] | None = None
    responses: list[str] = Field(min_length=2, max_length=16)
    reference: JSONValue = None


class CompareOptions(_Request):
    template: str | None = None  # verifier models: a pairwise template (A / B)
    variables: CodeArgs = Field(default_factory=dict)


class CompareRequest(_Request):
    model: str
    items: list[CompareItem] = Field(min_length=1)
    options: CompareOptions = Field(default_factory=CompareOptions)


class CompareResult(_Response):
    """``preference[i][j]`` = P(response i is better than response j); ``scores`` rank
    the responses (outcome scores, or mean win probability for a judge)."""

    id: str | None = None
    valid: bool = True
    error: str | None = None
    scores: list[float] | None = None
    preference: list[list[float]] | None = None
    ranking: list[int] | None = None  # best first
    # A judge's own verdicts before both orders are averaged: ``first_shown[i][j]`` =
    # P(response i is better) judged with i shown first, j second (0.5 on the diagonal).
    # Where it and 1 - first_shown[j][i] part, the judge leans on the order (JudgeBench's
    # inconsistency). None for models that score each response on its own.
    first_shown: list[list[float]] | None = None


class CompareResponse(_Response):
    model: str
    # The hub revision the model was pinned to (its config's `revision`), when it has one.
    revision: str | None = None
    # The version that scored every result here (the config's `version`, or the one an
    # admin load named): a trainer can drop scores of a version it has moved past.
    model_version: str | None = None
    results: list[CompareResult]
    usage: Usage = Field(default_factory=Usage)
