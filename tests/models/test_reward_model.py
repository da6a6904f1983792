from __future__ import annotations

from rewardserve.models.reward_model import BatchPolicy


def test_a_batch_grows_from_the_oldest_item_to_its_nearest_lengths():
    lengths = [100, 10, 96, 300, 104, 98]
    padded = BatchPolicy(max_batch_tokens=4 * 104, pads=True)
    # 100 first, then whichever neighbour pads least while four items of <= 104 fit.
    assert padded.around(lengths) == {0, 2, 4, 5}
    packed = BatchPolicy(max_batch_tokens=210, pads=False)
    assert packed.around(lengths) == {0, 5}  # 100 + 98; adding 96 or 104 passes 210


def test_the_oldest_item_is_taken_even_alone_and_over_budget():
    assert BatchPolicy(max_batch_tokens=50).around([300, 10, 20]) == {0}
    assert BatchPolicy(max_batch_items=1).around([5, 5, 5]) == {0}
