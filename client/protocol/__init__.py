"""The rewardserve wire contract, v1.

This package is the single definition of every request and response body. The service
validates against it and the client builds and parses with it; nothing else may copy it.

Requests reject unknown fields (a typo such as ``"normalise"`` is a 422, not a silent
default); responses ignore unknown fields so an older client keeps working against a
newer server.

The bodies live in its modules by what they serve: ``common`` (the parts every route
uses), ``scoring`` (this service's scoring routes), ``turns`` (/v1/score/turns), ``compat`` (the peers' routes),
``models`` and ``errors``. Import them from here.
"""

from __future__ import annotations

from rewardserve.client.protocol.common import (
    API_VERSION as API_VERSION,
)
from rewardserve.client.protocol.common import (
    MAX_JSON_DEPTH as MAX_JSON_DEPTH,
)
from rewardserve.client.protocol.common import (
    Activation as Activation,
)
from rewardserve.client.protocol.common import (
    CodeOptions as CodeOptions,
)
from rewardserve.client.protocol.common import (
    ContentPart as ContentPart,
)
from rewardserve.client.protocol.common import (
    FunctionCall as FunctionCall,
)
from rewardserve.client.protocol.common import (
    GoalOptions as GoalOptions,
)
from rewardserve.client.protocol.common import (
    ImagePart as ImagePart,
)
from rewardserve.client.protocol.common import (
    ImageURL as ImageURL,
)
from rewardserve.client.protocol.common import (
    ImageURLPart as ImageURLPart,
)
from rewardserve.client.protocol.common import (
    Item as Item,
)
from rewardserve.client.protocol.common import (
    ItemResult as ItemResult,
)
from rewardserve.client.protocol.common import (
    JSONValue as JSONValue,
)
from rewardserve.client.protocol.common import (
    Message as Message,
)
from rewardserve.client.protocol.common import (
    Normalize as Normalize,
)
from rewardserve.client.protocol.common import (
    Prompt as Prompt,
)
from rewardserve.client.protocol.common import (
    RenderedInput as RenderedInput,
)
from rewardserve.client.protocol.common import (
    Role as Role,
)
from rewardserve.client.protocol.common import (
    ScoreOptions as ScoreOptions,
)
from rewardserve.client.protocol.common import (
    TestVerdict as TestVerdict,
)
from rewardserve.client.protocol.common import (
    TextPart as TextPart,
)
from rewardserve.client.protocol.common import (
    TokenId as TokenId,
)
from rewardserve.client.protocol.common import (
    ToolCall as ToolCall,
)
from rewardserve.client.protocol.common import (
    Truncate as Truncate,
)
from rewardserve.client.protocol.common import (
    Usage as Usage,
)
from rewardserve.client.protocol.compat import (
    ClassifyData as ClassifyData,
)
from rewardserve.client.protocol.compat import (
    ClassifyRequest as ClassifyRequest,
)
from rewardserve.client.protocol.compat import (
    ClassifyResponse as ClassifyResponse,
)
from rewardserve.client.protocol.compat import (
    CommandRunResult as CommandRunResult,
)
from rewardserve.client.protocol.compat import (
    EmbeddingData as EmbeddingData,
)
from rewardserve.client.protocol.compat import (
    EmbeddingRequest as EmbeddingRequest,
)
from rewardserve.client.protocol.compat import (
    EmbeddingResponse as EmbeddingResponse,
)
from rewardserve.client.protocol.compat import (
    EvalResult as EvalResult,
)
from rewardserve.client.protocol.compat import (
    EvalTestCase as EvalTestCase,
)
from rewardserve.client.protocol.compat import (
    OpenRLHFRewardRequest as OpenRLHFRewardRequest,
)
from rewardserve.client.protocol.compat import (
    OpenRLHFRewardResponse as OpenRLHFRewardResponse,
)
from rewardserve.client.protocol.compat import (
    PoolingData as PoolingData,
)
from rewardserve.client.protocol.compat import (
    PoolingRequest as PoolingRequest,
)
from rewardserve.client.protocol.compat import (
    PoolingResponse as PoolingResponse,
)
from rewardserve.client.protocol.compat import (
    PoolingUsage as PoolingUsage,
)
from rewardserve.client.protocol.compat import (
    RunCodeRequest as RunCodeRequest,
)
from rewardserve.client.protocol.compat import (
    RunCodeResponse as RunCodeResponse,
)
from rewardserve.client.protocol.compat import (
    SubmitConfig as SubmitConfig,
)
from rewardserve.client.protocol.compat import (
    SubmitRequest as SubmitRequest,
)
from rewardserve.client.protocol.compat import (
    TokenizeRequest as TokenizeRequest,
)
from rewardserve.client.protocol.compat import (
    TokenizeResponse as TokenizeResponse,
)
from rewardserve.client.protocol.errors import (
    ERROR_STATUS as ERROR_STATUS,
)
from rewardserve.client.protocol.errors import (
    ErrorBody as ErrorBody,
)
from rewardserve.client.protocol.errors import (
    ErrorDetail as ErrorDetail,
)
from rewardserve.client.protocol.errors import (
    ErrorType as ErrorType,
)
from rewardserve.client.protocol.models import (
    AdminModelState as AdminModelState,
)
from rewardserve.client.protocol.models import (
    AdminOperation as AdminOperation,
)
from rewardserve.client.protocol.models import (
    CanaryRequest as CanaryRequest,
)
from rewardserve.client.protocol.models import (
    Health as Health,
)
from rewardserve.client.protocol.models import (
    LoadRequest as LoadRequest,
)
from rewardserve.client.protocol.models import (
    ModelCard as ModelCard,
)
from rewardserve.client.protocol.models import (
    ModelInfo as ModelInfo,
)
from rewardserve.client.protocol.models import (
    ModelKind as ModelKind,
)
from rewardserve.client.protocol.models import (
    ModelList as ModelList,
)
from rewardserve.client.protocol.models import (
    ModelState as ModelState,
)
from rewardserve.client.protocol.models import (
    RunningStats as RunningStats,
)
from rewardserve.client.protocol.models import (
    ServiceInfo as ServiceInfo,
)
from rewardserve.client.protocol.models import (
    ServiceLimits as ServiceLimits,
)
from rewardserve.client.protocol.models import (
    ShadowReport as ShadowReport,
)
from rewardserve.client.protocol.models import (
    SleepRequest as SleepRequest,
)
from rewardserve.client.protocol.models import (
    VersionInfo as VersionInfo,
)
from rewardserve.client.protocol.models import (
    WeightsRequest as WeightsRequest,
)
from rewardserve.client.protocol.scoring import (
    Aggregate as Aggregate,
)
from rewardserve.client.protocol.scoring import (
    Aggregation as Aggregation,
)
from rewardserve.client.protocol.scoring import (
    CompareItem as CompareItem,
)
from rewardserve.client.protocol.scoring import (
    CompareOptions as CompareOptions,
)
from rewardserve.client.protocol.scoring import (
    CompareRequest as CompareRequest,
)
from rewardserve.client.protocol.scoring import (
    CompareResponse as CompareResponse,
)
from rewardserve.client.protocol.scoring import (
    CompareResult as CompareResult,
)
from rewardserve.client.protocol.scoring import (
    Criterion as Criterion,
)
from rewardserve.client.protocol.scoring import (
    CriterionResult as CriterionResult,
)
from rewardserve.client.protocol.scoring import (
    EscalateWhen as EscalateWhen,
)
from rewardserve.client.protocol.scoring import (
    Escalation as Escalation,
)
from rewardserve.client.protocol.scoring import (
    RubricItem as RubricItem,
)
from rewardserve.client.protocol.scoring import (
    RubricRequest as RubricRequest,
)
from rewardserve.client.protocol.scoring import (
    RubricResponse as RubricResponse,
)
from rewardserve.client.protocol.scoring import (
    RubricResult as RubricResult,
)
from rewardserve.client.protocol.scoring import (
    SamplingOptions as SamplingOptions,
)
from rewardserve.client.protocol.scoring import (
    Scale as Scale,
)
from rewardserve.client.protocol.scoring import (
    ScoreRequest as ScoreRequest,
)
from rewardserve.client.protocol.scoring import (
    ScoreResponse as ScoreResponse,
)
from rewardserve.client.protocol.scoring import (
    Shaping as Shaping,
)
from rewardserve.client.protocol.scoring import (
    StepOptions as StepOptions,
)
from rewardserve.client.protocol.scoring import (
    StepsFrom as StepsFrom,
)
from rewardserve.client.protocol.scoring import (
    StepSpan as StepSpan,
)
from rewardserve.client.protocol.scoring import (
    StepsRequest as StepsRequest,
)
from rewardserve.client.protocol.scoring import (
    StepsResponse as StepsResponse,
)
from rewardserve.client.protocol.scoring import (
    StepsResult as StepsResult,
)
from rewardserve.client.protocol.scoring import (
    VerifyOptions as VerifyOptions,
)
from rewardserve.client.protocol.scoring import (
    VerifyRequest as VerifyRequest,
)
from rewardserve.client.protocol.scoring import (
    VerifyResponse as VerifyResponse,
)
from rewardserve.client.protocol.scoring import (
    VerifyResult as VerifyResult,
)
from rewardserve.client.protocol.scoring import (
    VerifySample as VerifySample,
)
from rewardserve.client.protocol.scoring import (
    components_by_name as components_by_name,
)
from rewardserve.client.protocol.turns import (
    TurnOptions as TurnOptions,
)
from rewardserve.client.protocol.turns import (
    TurnsRequest as TurnsRequest,
)
from rewardserve.client.protocol.turns import (
    TurnsResponse as TurnsResponse,
)
from rewardserve.client.protocol.turns import (
    TurnsResult as TurnsResult,
)
