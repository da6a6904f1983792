"""What a client call takes and what its errors say: every option of an endpoint as a
keyword (a CLIP model's goal included), the offending field in ``str(error)``, and a
warning where the options cannot mean what they ask."""

from __future__ import annotations

import pytest

from rewardserve.client import AsyncRewardClient, UnprocessableEntityError
from rewardserve.client.images import image_part
from rewardserve.models.spec import ModelSpec
from rewardserve.service.settings import Settings
from tests.harness import serve_in_process
from tests.models.kinds.test_clip_goal import BASELINE, by_hand, frames


async def test_score_takes_every_score_option_and_errors_name_the_param(clip_model):
    settings = Settings(models=[ModelSpec(name="clip", kind="clip_goal", source=str(clip_model))])
    async with serve_in_process(settings) as (_, http):
        client = AsyncRewardClient("http://rewardserve", http_client=http)
        images = frames(3)
        item = {"messages": [{"role": "user", "content": [image_part(i) for i in images]}]}
        out = await client.score("clip", [item], goal="a blue circle", baseline=BASELINE, alpha=0.5)
        assert out.results[0].score == pytest.approx(
            by_hand(clip_model, images, "a blue circle", BASELINE, 0.5)[-1], abs=1e-6
        )
        with pytest.raises(UnprocessableEntityError) as caught:
            await client.score("clip", [item], alpha=0.5)  # no goal here, none in the config
        assert caught.value.param == "options.goal" and "(param: options.goal)" in str(caught.value)
        with pytest.raises(ValueError, match="normalise"):
            await client.score("math", [{"response": "1"}], normalise="group")


def test_several_greedy_samples_are_warned_about():
    from rewardserve.client._core import verify_call

    with pytest.warns(UserWarning, match="temperature 0"):
        verify_call("judge", [{"response": "x"}], {"mode": "generate", "n": 4})
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        verify_call("judge", [{"response": "x"}], {"mode": "generate", "n": 4, "temperature": 0.7})
