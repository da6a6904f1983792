"""A base URL the client cannot send to is refused when the client is made, not retried."""

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
