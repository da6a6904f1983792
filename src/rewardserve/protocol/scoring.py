"""The scoring routes' bodies: /v1/score, /v1/score/steps, /v1/verify, /v1/rubric,
/v1/compare."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, model_validator

from rewardserve.protocol.common import (
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
    model: str = Field(description="The served model's name, as in the service's config (GET /v1/models lists them).")
    items: list[Item] = Field(
        min_length=1, description="The items to score, in order; each result answers the item at the same position."
    )
    options: ScoreOptions = Field(
        default_factory=ScoreOptions, description="How the scores are computed and shaped; every field has a default."
    )


def components_by_name(results: list[ItemResult]) -> dict[str, list[float | None]]:
    """Each component's scores in item order (None: invalid, or not part of that item)."""
    names = list(dict.fromkeys(name for r in results for name in (r.components or {})))
    return {name: [(r.components or {}).get(name) for r in results] for name in names}


class ScoreResponse(_Response):
    model: str = Field(description="The model that scored the items.")
    revision: str | None = Field(
        default=None,
        description=("The hub revision the model was pinned to (its config's `revision`), when it has one."),
    )
    model_version: str | None = Field(
        default=None,
        description=(
            "The version that scored every result here (the config's `version`, or the one an"
            " admin load named): a trainer can drop scores of a version it has moved past."
        ),
    )
    results: list[ItemResult] = Field(description="One result per item, in the order the items were sent.")
    usage: Usage = Field(default_factory=Usage, description="What the request cost: items scored and tokens read.")
    warnings: list[str] = Field(
        default_factory=list,
        description=(
            "What the service noticed about the request that changes what the scores mean "
            "(group normalization that saw no groups)."
        ),
    )

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

    steps_from: StepsFrom = Field(
        default="auto",
        description=(
            "Where the steps come from: steps (the item's list), separator (the final "
            "assistant message split on `separator`), turns (each assistant turn), or auto "
            "(the list if given, else turns, else the separator, else the whole response)."
        ),
    )
    separator: str | None = Field(
        default=None,
        min_length=1,
        description="The string that separates steps in the response, with steps_from separator.",
    )
    aggregate: Aggregate | None = Field(
        default=None,
        description=(
            "Which aggregate of the step scores (min, prod, mean, last, sum) is the item's "
            "`score`; unset: the model's own."
        ),
    )
    threshold: float | None = Field(
        default=None,
        description=(
            "A step scored below this is the first error step (`first_error_step`); unset: none is looked for."
        ),
    )
    shaping: Shaping = Field(
        default="none",
        description=(
            "raw: step_rewards = step_scores; delta: s_t - s_(t-1) (s_(-1) = 0, so they sum "
            "to the last score); potential: gamma * s_t - s_(t-1), with s_(-1) = 0 and the "
            "last step's s_t (the end's potential) 0, so that their discounted sum is 0 and, "
            "added to an outcome reward, they cannot change which policy is best (Ng et al. "
            "1999); group: GRPO process advantages over each group_id's steps."
        ),
    )
    gamma: float = Field(
        default=1.0, ge=0.0, le=1.0, description="The discount of `potential` shaping, in 0..1 (default 1)."
    )
    truncate: Literal["steps", "error"] = Field(
        default="steps",
        description=(
            '"steps": a trajectory longer than the model\'s context is scored up to the last '
            'step that fits, the rest reported unscored; "error": 413 instead.'
        ),
    )
    window: int | None = Field(
        default=None,
        ge=1,
        le=1000,
        description="clip_goal frames: each step reward is the mean over the last `window` frames.",
    )
    policy_tokenizer: str | None = Field(
        default=None,
        max_length=200,
        description=(
            "A tokenizer the service was started with (its setting policy_tokenizers), named:"
            " each item's response_token_ids get token_rewards, its step rewards "
            "(step_rewards when shaped, else step_scores) on the last token overlapping each "
            'step ("last"), or shared among every one ("uniform"), as '
            "rewardserve.client.token_rewards does."
        ),
    )
    token_spread: Literal["last", "uniform"] = Field(
        default="last",
        description=(
            "How a step's reward is put on tokens: on the last token overlapping the step, or shared among all of them."
        ),
    )


class StepSpan(_Response):
    """Where a step is in what the client sent: ``message`` indexes ``messages`` (None
    for ``response``, and for ``steps`` lists, whose offsets run over the steps
    concatenated), ``start``/``end`` are character offsets in that text."""

    message: int | None = Field(
        default=None,
        description=(
            "The index of the message in `messages` that holds the step; None for `response` and `steps` items."
        ),
    )
    start: int = Field(description="The step's first character offset.")
    end: int = Field(description="The offset just past the step's last character.")


class StepsResult(ItemResult):
    step_scores: list[float | None] = Field(
        default_factory=list,
        description=("Each step's score, in order; None for a step not scored (cut off by the context)."),
    )
    steps_scored: int = Field(default=0, description="How many steps were scored.")
    aggregates: dict[str, float] | None = Field(
        default=None, description="The scored steps' min, prod, mean, last and sum, by name."
    )
    first_error_step: int | None = Field(
        default=None,
        description=(
            "The index of the first step scored below the request's `threshold`; None when "
            "none was or no threshold was given."
        ),
    )
    spans: list[StepSpan] = Field(default_factory=list, description="Where each step is in what the client sent.")
    step_rewards: list[float | None] | None = Field(
        default=None, description="Shaped step rewards (with `shaping`); None when unshaped."
    )
    token_rewards: list[float] | None = Field(
        default=None, description="With `policy_tokenizer`: a reward per token of the item's response_token_ids."
    )


class StepsRequest(_Request):
    model: str = Field(description="The served process reward model's name.")
    items: list[Item] = Field(
        min_length=1, description="The items to score, in order; each result answers the item at the same position."
    )
    options: StepOptions = Field(default_factory=StepOptions, description="How steps are found, aggregated and shaped.")


class StepsResponse(_Response):
    model: str = Field(description="The model that scored the items.")
    revision: str | None = Field(
        default=None,
        description=("The hub revision the model was pinned to (its config's `revision`), when it has one."),
    )
    model_version: str | None = Field(
        default=None,
        description=(
            "The version that scored every result here (the config's `version`, or the one an"
            " admin load named): a trainer can drop scores of a version it has moved past."
        ),
    )
    results: list[StepsResult] = Field(description="One result per item, in the order the items were sent.")
    usage: Usage = Field(default_factory=Usage, description="What the request cost: items scored and tokens read.")
    warnings: list[str] = Field(
        default_factory=list, description="As ScoreResponse's: group normalization or shaping that saw no groups."
    )


# --------------------------------------------------------------------------- /v1/verify


class SamplingOptions(_Request):
    """Generate mode: transformers ``generate`` parameters; ``n`` samples are averaged."""

    temperature: float = Field(default=0.0, ge=0.0, le=5.0, description="Sampling temperature; 0 is greedy.")
    top_p: float = Field(default=1.0, gt=0.0, le=1.0, description="Nucleus sampling: the probability mass kept.")
    max_new_tokens: int = Field(default=256, ge=1, le=4096, description="The most tokens each sample generates.")
    n: int = Field(default=1, ge=1, le=16, description="How many samples are drawn and averaged.")
    seed: int | None = Field(
        default=None, ge=0, le=2**63 - 1, description="The sampling seed, for repeatable samples; unset: random."
    )


class VerifyOptions(SamplingOptions):
    """``logprob``: ONE forward pass with the verdict slot prefilled; score = the
    template's choices' probabilities (P(yes) for yes/no) weighted by their values.
    ``generate``: sample a rationale, parse the verdict; unparsable = invalid."""

    mode: Literal["logprob", "generate"] = Field(
        default="logprob",
        description=(
            "logprob: one forward pass reading the verdict's probability; generate: sample a "
            "rationale and parse the verdict."
        ),
    )
    template: str | None = Field(
        default=None,
        description=("The name of a prompt template the model's config defines; unset: the model's default template."),
    )
    variables: CodeArgs = Field(
        default_factory=dict,
        description=("Extra values the template's placeholders read, by name, beside the item's own fields."),
    )


class VerifySample(_Response):
    text: str = Field(description="What the model generated.")
    score: float | None = Field(default=None, description="The verdict's value read from it; None when it names none.")
    verdict: str | None = Field(default=None, description="The verdict it named.")


class VerifyResult(ItemResult):
    verdict: str | None = Field(
        default=None,
        description=("The verdict: logprob mode, the most probable choice; generate mode, the first parsed sample's."),
    )
    rationale: str | None = Field(
        default=None, description="Generate mode: the text of the first sample whose verdict could be parsed."
    )
    probabilities: dict[str, float] | None = Field(
        default=None, description="Logprob mode: each verdict choice's probability, by name."
    )
    samples: list[VerifySample] | None = Field(default=None, description="Generate mode: every sample, parsed or not.")


class VerifyRequest(_Request):
    model: str = Field(description="The served verifier's name.")
    items: list[Item] = Field(
        min_length=1, description="The items to score, in order; each result answers the item at the same position."
    )
    options: VerifyOptions = Field(default_factory=VerifyOptions, description="How the verifier is asked.")


class VerifyResponse(_Response):
    model: str = Field(description="The model that scored the items.")
    revision: str | None = Field(
        default=None,
        description=("The hub revision the model was pinned to (its config's `revision`), when it has one."),
    )
    model_version: str | None = Field(
        default=None,
        description=(
            "The version that scored every result here (the config's `version`, or the one an"
            " admin load named): a trainer can drop scores of a version it has moved past."
        ),
    )
    results: list[VerifyResult] = Field(description="One result per item, in the order the items were sent.")
    usage: Usage = Field(default_factory=Usage, description="What the request cost: items scored and tokens read.")


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

    name: str = Field(
        pattern=r"^[A-Za-z_][A-Za-z0-9_]*$",
        max_length=64,
        description="The criterion's name, an identifier; its result and formulas use it.",
    )
    weight: float = Field(default=1.0, ge=0.0, description="Its weight in the weighted mean (default 1).")
    fn: str | None = Field(default=None, description="A rule's name (a served rule function), called with `args`.")
    args: CodeArgs = Field(default_factory=dict, description="The rule's arguments; `{{ }}` in them reads the item.")
    text: str | None = Field(
        default=None, max_length=4000, description="A question the judge answers about the response, yes or no."
    )
    model: str | None = Field(
        default=None, max_length=128, description="A served model whose score is this criterion's."
    )
    python: str | None = Field(
        default=None,
        max_length=100_000,
        description=(
            "A grader written in the request, run in the code model's sandbox: Python source "
            "defining ``grade(sample, item) -> float`` (OpenAI's python grader), where sample"
            ' is {"output_text": the response} and item {"reference": the item\'s reference}. '
            "Like any criterion's args, ``{{ }}`` in it reads the item."
        ),
    )
    normalize: Scale = Field(
        default="none",
        description=(
            "How the raw value is put on a common scale: none, sigmoid, group (against the "
            "other items of its group) or running (the model's running statistics; model "
            "criteria only)."
        ),
    )
    choices: list[Annotated[str, Field(min_length=1, max_length=200)]] | None = Field(
        default=None,
        min_length=2,
        max_length=10,
        description=("The answers the judge may give to `text` (2 to 10, distinct); unset: the judge template's own."),
    )
    polarity: Literal["positive", "negative"] = Field(
        default="positive",
        description=("negative: a high value is bad; a score in [0, 1] is read as 1 - score, any other as -score."),
    )
    pass_threshold: float = Field(
        default=0.5,
        description=("The score at or above which the criterion passes (for all, any, threshold aggregation)."),
    )

    @model_validator(mode="after")
    def _one_source(self) -> Criterion:
        if sum(x is not None for x in (self.fn, self.text, self.model, self.python)) != 1:
            raise ValueError(
                "a criterion has exactly one of 'fn' (a rule), 'text' (a judge question), "
                "'model' (a served model's score) or 'python' (a grader run in a sandbox)"
            )
        if self.python is not None:  # the python_grader rule (models/rules/code/__init__.py) runs it
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

    uncertainty_above: float | None = Field(
        default=None, ge=0, description="Escalate an item whose ensemble uncertainty is above this."
    )
    margin_below: float | None = Field(
        default=None, ge=0, description="Escalate an item whose score is within this of `threshold`."
    )
    threshold: float = Field(default=0.5, description="The decision boundary `margin_below` measures from.")
    group_zero_variance: bool = Field(
        default=False,
        description=("Escalate every item of a group whose cheap scores are all equal (no learning signal)."),
    )
    invalid: bool = Field(default=False, description="Escalate an item the cheap score could not compute.")


class Escalation(_Request):
    """Ask ``to`` (a served model; a verifier answers with P(yes)) for the items ``when``
    picks, at most ``max_fraction`` of the request's items; its score, on ``normalize``'s
    scale, replaces the cheap one."""

    to: str = Field(max_length=128, description="The served model that rescored escalated items.")
    when: EscalateWhen = Field(description="Which items escalate.")
    max_fraction: float = Field(
        default=1.0,
        ge=0,
        le=1,
        description="At most this fraction of the request's items escalate.",
    )
    normalize: Literal["none", "sigmoid", "running"] = Field(
        default="none",
        description=(
            "The scale the expensive model's score is put on before it replaces the cheap "
            "one: none, sigmoid or running."
        ),
    )


class RubricItem(Item):
    criteria: list[Criterion] | None = Field(
        default=None, max_length=64, description="This item's own criteria, used in place of the request's."
    )


class Aggregation(_Request):
    mode: Literal["weighted_mean", "all", "any", "threshold", "formula"] = Field(
        default="weighted_mean",
        description=(
            "How criterion scores combine: weighted_mean, all (every one passes), any, "
            "threshold (the weighted mean passes `threshold`), or formula."
        ),
    )
    threshold: float = Field(default=0.5, description="threshold mode: the weighted mean that passes.")
    formula: str | None = Field(
        default=None, max_length=2000, description="formula mode: an arithmetic expression over the criteria's names."
    )

    @model_validator(mode="after")
    def _formula_given(self) -> Aggregation:
        if self.mode == "formula" and not self.formula:
            raise ValueError("mode 'formula' needs a 'formula'")
        return self


class RubricRequest(_Request):
    judge: str | None = Field(
        default=None, description="The served judge that answers text criteria; unset when there are none."
    )
    items: list[RubricItem] = Field(
        min_length=1, description="The items to score, in order; each result answers the item at the same position."
    )
    criteria: list[Criterion] | None = Field(
        default=None, max_length=64, description="The criteria every item is scored on (an item's own replace them)."
    )
    aggregation: Aggregation = Field(
        default_factory=Aggregation, description="How the criteria's scores combine into the item's."
    )
    judge_template: str = Field(default="criterion", description="The judge's prompt template for a text criterion.")
    escalate: Escalation | None = Field(default=None, description="Send doubtful items to a more expensive model.")


class CriterionResult(_Response):
    name: str = Field(description="The criterion's name.")
    score: float | None = Field(
        default=None, description="Its score as aggregated: normalized, polarity applied; null when invalid."
    )
    valid: bool = Field(default=True, description="False when it could not be computed; `error` says why.")
    error: str | None = Field(default=None, description="Why it could not be computed.")
    reason: str | None = Field(default=None, description="The judge's or rule's reason, when it gave one.")
    weight: float = Field(default=1.0, description="Its weight in the mix.")
    raw: float | None = Field(default=None, description="The value before normalization and polarity.")
    running_count: int | None = Field(
        default=None,
        description=(
            "normalize running: how many scores the model's statistics held (below 100 they are still settling)."
        ),
    )


class RubricResult(ItemResult):
    criteria: list[CriterionResult] = Field(default_factory=list, description="Each criterion's result, in order.")


class RubricResponse(_Response):
    judge: str | None = Field(default=None, description="The judge that answered text criteria.")
    results: list[RubricResult] = Field(
        description="One result per item, in order: its score, validity and each criterion's result."
    )
    usage: Usage = Field(default_factory=Usage, description="What the request cost.")
    warnings: list[str] = Field(
        default_factory=list,
        description=(
            "What the service noticed about the request that changes what the results mean; empty when nothing."
        ),
    )

    def components(self) -> dict[str, list[float | None]]:
        """Each criterion's scores as aggregated, by name, in item order."""
        return components_by_name(list(self.results))


# --------------------------------------------------------------------------- /v1/compare


class CompareItem(_Request):
    id: str | None = Field(default=None, description="Your id for the item, echoed on its result.")
    prompt: str | list[Message] | None = Field(
        default=None, description="The prompt the responses answer: text or a conversation."
    )
    responses: list[str] = Field(min_length=2, max_length=16, description="The responses to compare, 2 to 16.")
    reference: JSONValue = Field(default=None, description="The ground truth, for judges and rules that read one.")


class CompareOptions(_Request):
    template: str | None = Field(
        default=None,
        description=(
            "The name of a prompt template the model's config defines (verifier models: a "
            "pairwise template, A / B); unset: the model's default."
        ),
    )
    variables: CodeArgs = Field(
        default_factory=dict,
        description=("Extra values the template's placeholders read, by name, beside the item's own fields."),
    )


class CompareRequest(_Request):
    model: str = Field(description="The served model that compares (a reward model or a pairwise judge).")
    items: list[CompareItem] = Field(min_length=1, description="The items whose responses are compared.")
    options: CompareOptions = Field(default_factory=CompareOptions, description="The judge's template and variables.")


class CompareResult(_Response):
    """``preference[i][j]`` = P(response i is better than response j); ``scores`` rank
    the responses (outcome scores, or mean win probability for a judge)."""

    id: str | None = Field(default=None, description="The item's id, as sent.")
    valid: bool = Field(default=True, description="False when the comparison could not be computed; `error` says why.")
    error: str | None = Field(default=None, description="Why the comparison could not be computed.")
    scores: list[float] | None = Field(default=None, description="A score per response, in order.")
    preference: list[list[float]] | None = Field(
        default=None, description="preference[i][j]: the probability that response i is better than response j."
    )
    ranking: list[int] | None = Field(default=None, description="The responses' indices, best first.")
    first_shown: list[list[float]] | None = Field(
        default=None,
        description=(
            "A judge's own verdicts before both orders are averaged: ``first_shown[i][j]`` = "
            "P(response i is better) judged with i shown first, j second (0.5 on the "
            "diagonal). Where it and 1 - first_shown[j][i] part, the judge leans on the order"
            " (JudgeBench's inconsistency). None for models that score each response on its "
            "own."
        ),
    )


class CompareResponse(_Response):
    model: str = Field(description="The model that compared.")
    revision: str | None = Field(
        default=None,
        description=("The hub revision the model was pinned to (its config's `revision`), when it has one."),
    )
    model_version: str | None = Field(
        default=None,
        description=(
            "The version that scored every result here (the config's `version`, or the one an"
            " admin load named): a trainer can drop scores of a version it has moved past."
        ),
    )
    results: list[CompareResult] = Field(description="One result per item, in the order the items were sent.")
    usage: Usage = Field(default_factory=Usage, description="What the request cost: items scored and tokens read.")
