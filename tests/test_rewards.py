import pytest

from engine.loop.rewards import areal_shape, discounted_returns, group_advantages


def test_areal_shape_hand_computed():
    assert areal_shape(1.0) == 1.0
    assert areal_shape(0.0) == -1.0
    # ((1 - 0.5) * 2 - 0.2) * 3 = 2.4 ; ((0 - 0.5) * 2 - 0.2) * 3 = -3.6
    assert areal_shape(1.0, scale=3.0, bias=0.2) == pytest.approx(2.4)
    assert areal_shape(0.0, scale=3.0, bias=0.2) == pytest.approx(-3.6)


def test_discounted_returns_hand_computed():
    # rewards -1, -1, 1 with discount 0.9: G2 = 1, G1 = -1 + 0.9 = -0.1, G0 = -1 + 0.9 * -0.1 = -1.09
    assert discounted_returns([-1, -1, 1], 0.9) == pytest.approx([-1.09, -0.1, 1.0])
    assert discounted_returns([1, 2, 3], 1.0) == pytest.approx([6, 5, 3])
    assert discounted_returns([1, 2, 3], 0.0) == pytest.approx([1, 2, 3])
    assert discounted_returns([], 0.9) == []


def test_group_advantages():
    adv = group_advantages([1.0, 0.0, 0.0, 1.0])
    assert adv[0] == pytest.approx(-adv[1])
    assert sum(adv) == pytest.approx(0.0)
    # sample std of [1,0,0,1] is sqrt(1/3); (1 - 0.5) / 0.57735 = 0.866
    assert adv[0] == pytest.approx(0.8660, abs=1e-3)
    assert group_advantages([2.0, 2.0]) == [0.0, 0.0]
