"""The rewardserve wire contract, v1.

This package is the single definition of every request and response body. The service
validates against it and the client builds and parses with it; nothing else may copy it.

Requests reject unknown fields (a typo such as ``"normalise"`` is a 422, not a silent
default); responses ignore unknown fields so an older client keeps working against a
newer server.

The bodies live in its modules by what they serve: ``common`` (the parts every route
uses), ``scoring`` (this service's scoring routes), ``compat`` (the peers' routes),
``models`` and ``errors``. Import them from here.
"""

from __future__ import annotations

from rewardserve.client.protocol.common import (
    API_VERSION as API_VERSION,
    Activation as Activation,
    ContentPart as ContentPart,
    FunctionCall as FunctionCall,
    GoalOptions as GoalOptions,
    ImagePart as ImagePart,
    ImageURL as ImageURL,
    ImageURLPart as ImageURLPart,
    Item as Item,
    ItemResult as ItemResult,
    JSONValue as JSONValue,
    MAX_JSON_DEPTH as MAX_JSON_DEPTH,
    Message as Message,
    Normalize as Normalize,
    Prompt as Prompt,
    RenderedInput as RenderedInput,
    Role as Role,
    ScoreOptions as ScoreOptions,
    TextPart as TextPart,
    TokenId as TokenId,
    ToolCall as ToolCall,
    Truncate as Truncate,
    Usage as Usage,
)
from rewardserve.client.protocol.scoring import (
    Aggregate as Aggregate,
    Aggregation as Aggregation,
    CompareItem as CompareItem,
    CompareOptions as CompareOptions,
    CompareRequest as CompareRequest,
    CompareResponse as CompareResponse,
    CompareResult as CompareResult,
    Criterion as Criterion,
    CriterionResult as CriterionResult,
    EscalateWhen as EscalateWhen,
    Escalation as Escalation,
    RubricItem as RubricItem,
    RubricRequest as RubricRequest,
    RubricResponse as RubricResponse,
    RubricResult as RubricResult,
    SamplingOptions as SamplingOptions,
    Scale as Scale,
    ScoreRequest as ScoreRequest,
    ScoreResponse as ScoreResponse,
    Shaping as Shaping,
    StepOptions as StepOptions,
    StepSpan as StepSpan,
    StepsFrom as StepsFrom,
    StepsRequest as StepsRequest,
    StepsResponse as StepsResponse,
    StepsResult as StepsResult,
    VerifyOptions as VerifyOptions,
    VerifyRequest as VerifyRequest,
    VerifyResponse as VerifyResponse,
    VerifyResult as VerifyResult,
    VerifySample as VerifySample,
    components_by_name as components_by_name,
)
from rewardserve.client.protocol.compat import (
    ClassifyData as ClassifyData,
    ClassifyRequest as ClassifyRequest,
    ClassifyResponse as ClassifyResponse,
    EmbeddingData as EmbeddingData,
    EmbeddingRequest as EmbeddingRequest,
    EmbeddingResponse as EmbeddingResponse,
    OpenRLHFRewardRequest as OpenRLHFRewardRequest,
    OpenRLHFRewardResponse as OpenRLHFRewardResponse,
    PoolingData as PoolingData,
    PoolingRequest as PoolingRequest,
    PoolingResponse as PoolingResponse,
    PoolingUsage as PoolingUsage,
)
from rewardserve.client.protocol.models import (
    Health as Health,
    ModelCard as ModelCard,
    ModelKind as ModelKind,
    ModelList as ModelList,
    RunningStats as RunningStats,
    ShadowReport as ShadowReport,
)
from rewardserve.client.protocol.errors import (
    ERROR_STATUS as ERROR_STATUS,
    ErrorBody as ErrorBody,
    ErrorDetail as ErrorDetail,
    ErrorType as ErrorType,
)
