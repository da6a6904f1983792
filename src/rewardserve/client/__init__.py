"""rewardserve client: what RL trainers import. Needs only httpx and pydantic."""

from rewardserve.client.aio import AsyncRewardClient
from rewardserve.client.errors import (
    APIConnectionError,
    APIResponseValidationError,
    APIStatusError,
    APITimeoutError,
    AuthenticationError,
    BadRequestError,
    DeadlineExceededError,
    InternalServerError,
    NotFoundError,
    PayloadTooLargeError,
    PermissionDeniedError,
    RateLimitError,
    ResponseTooLargeError,
    RewardServeError,
    ServiceUnavailableError,
    UnprocessableEntityError,
)
from rewardserve.client.sync import RewardClient
from rewardserve.client.token_alignment import token_rewards
from rewardserve.protocol import Item, ItemResult, Message, ScoreResponse

__version__ = "0.1.0"

__all__ = [
    "APIConnectionError",
    "APIResponseValidationError",
    "APIStatusError",
    "APITimeoutError",
    "AsyncRewardClient",
    "AuthenticationError",
    "BadRequestError",
    "DeadlineExceededError",
    "InternalServerError",
    "Item",
    "ItemResult",
    "Message",
    "NotFoundError",
    "PayloadTooLargeError",
    "PermissionDeniedError",
    "RateLimitError",
    "ResponseTooLargeError",
    "RewardClient",
    "RewardServeError",
    "ScoreResponse",
    "ServiceUnavailableError",
    "UnprocessableEntityError",
    "__version__",
    "token_rewards",
]
