import random

from rewardserve.models.batch_policy import BatchPolicy


def test_a_batch_fits_by_padded_cost_item_count_and_padding_share():
    padded = BatchPolicy(max_batch_tokens=4 * 104, pads=True)
    assert padded.fits([100, 104, 96, 98]) and not padded.fits([100, 105, 96, 98])
    assert BatchPolicy(max_batch_tokens=210, pads=False).fits([100, 110]) and not BatchPolicy(
        max_batch_tokens=210, pads=False
    ).fits([100, 111])
    assert not BatchPolicy(max_batch_items=2).fits([1, 1, 1])
    assert not BatchPolicy(max_padding_ratio=0.1).fits([100, 70])  # 30 of 200 padded tokens
    assert BatchPolicy(max_batch_tokens=50).fits([300])  # one item always fits


def test_fits_sized_agrees_with_fits_on_the_lengths_themselves():
    rng = random.Random(7)
    for _ in range(500):
        policy = BatchPolicy(
            max_batch_tokens=rng.randint(1, 2000),
            max_batch_items=rng.randint(1, 8),
            pads=rng.random() < 0.5,
            max_padding_ratio=rng.choice([1.0, 0.3, 0.05]),
        )
        lengths = [rng.randint(0, 400) for _ in range(rng.randint(0, 9))]
        sized = (len(lengths), sum(lengths), max(lengths, default=0))
        assert policy.fits_sized(*sized) == policy.fits(lengths)
        assert policy.cost_sized(*sized) == policy.cost(lengths)
