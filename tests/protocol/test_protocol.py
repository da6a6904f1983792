"""The wire contract's shared types."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from rewardserve.protocol import ErrorBody, Item, ItemResult, Message, ScoreRequest


def test_item_shapes():
    a = Item(messages=[{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}])
    b = Item(prompt="q", response="a")
    c = Item(prompt=[{"role": "system", "content": "s"}, {"role": "user", "content": "q"}], response="a")
    assert [m.role for m in a.conversation()] == ["user", "assistant"]
    assert [m.model_dump(exclude_none=True) for m in b.conversation()] == [
        m.model_dump(exclude_none=True) for m in a.conversation()
    ]
    assert [m.role for m in c.conversation()] == ["system", "user", "assistant"]
    assert a.response_text() == b.response_text() == "a"
    assert Item(response="only").conversation()[-1].content == "only"


@pytest.mark.parametrize(
    "bad",
    [
        {},
        {"prompt": "q"},
        {"messages": [], "id": "x"},
        {"messages": [{"role": "user", "content": "q"}], "response": "a"},
        {"response": "a", "unknown": 1},
    ],
)
def test_bad_items(bad):
    with pytest.raises(ValidationError):
        Item.model_validate(bad)


def test_multimodal_and_tool_call_messages():
    m = Message.model_validate(
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "what is "},
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}},
                {"type": "image", "url": "data:image/png;base64,AAAA"},
                {"type": "text", "text": "this?"},
            ],
        }
    )
    assert m.text() == "what is this?" and m.has_images()
    t = Message.model_validate(
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "search", "arguments": '{"q": 1}'}}],
        }
    )
    assert t.tool_calls[0].function.name == "search"
    with pytest.raises(ValidationError):
        Message.model_validate({"role": "user", "content": [{"type": "image"}]})


def test_requests_forbid_unknown_fields_responses_ignore_them():
    with pytest.raises(ValidationError):
        ScoreRequest.model_validate({"model": "m", "items": [{"response": "a"}], "optoins": {}})
    result = ItemResult.model_validate({"score": 1.0, "valid": True, "new_field": 3})
    assert result.score == 1.0
    body = ErrorBody.model_validate({"error": {"type": "not_found", "message": "m", "param": "model"}})
    assert body.error.param == "model"
