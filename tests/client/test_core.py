"""What the clients check before sending: a base URL they can send to, items whose unknown
fields are told with the nearest known one."""

from __future__ import annotations

import pytest

from rewardserve.client import AsyncRewardClient, RewardClient


@pytest.mark.parametrize("url", ["localhost:8000", "127.0.0.1:8000", "ftp://host:8000", "http://a:1,b:2"])
def test_a_url_without_http_scheme_is_refused_at_once(url):
    with pytest.raises(ValueError, match="needs http:// or https://"):
        RewardClient(url)


async def test_the_async_client_refuses_it_too():
    with pytest.raises(ValueError, match="http://localhost:8000"):
        AsyncRewardClient("localhost:8000")


def test_http_and_https_urls_are_taken():
    with RewardClient("http://a:1, https://b:2/") as client:
        assert client.base_url == "http://a:1, https://b:2/"


def test_an_item_field_typo_is_told_with_the_nearest_field_before_anything_is_sent():
    from pydantic import ValidationError

    with RewardClient("http://127.0.0.1:1") as client:  # nothing listens: the items are refused first
        with pytest.raises(ValidationError) as refused:
            client.score("rm", [{"respnse": "x"}])
    message = str(refused.value)
    assert "unknown field 'respnse'; did you mean 'response'? Item has the fields: " in message, message
    assert "reference" in message
