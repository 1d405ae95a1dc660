"""analysis.accounting.rdp: RDP → (ε, δ) conversions against plain loops and dp-accounting."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from analysis.accounting import rdp as rdp_mod
from analysis.core.errors import PateError

dp_accounting = pytest.importorskip("dp_accounting")
from dp_accounting.rdp import rdp_privacy_accountant  # noqa: E402


def loop_classic(orders, rdp, delta):
    """Mironov 2017, Proposition 3, one order at a time."""
    best = (math.inf, None)
    for a, r in zip(orders, rdp):
        e = r + math.log(1 / delta) / (a - 1)
        if e < best[0]:
            best = (e, a)
    return best


orders_st = st.lists(st.floats(1.02, 500.0), min_size=1, max_size=12, unique=True)


@settings(max_examples=150, deadline=None)
@given(orders=orders_st, data=st.data(), delta=st.floats(1e-12, 0.5))
def test_classic_matches_plain_loop(orders, data, delta):
    rdp = data.draw(st.lists(st.floats(0.0, 50.0), min_size=len(orders), max_size=len(orders)))
    eps, order = rdp_mod.eps_from_rdp(orders, rdp, delta, "classic")
    want, want_order = loop_classic(orders, rdp, delta)
    assert eps == pytest.approx(want, rel=1e-12, abs=1e-12)
    assert rdp_mod.eps_curve(orders, rdp, delta)[orders.index(order)] == pytest.approx(want, rel=1e-12)


@settings(max_examples=150, deadline=None)
@given(orders=orders_st, data=st.data(), delta=st.floats(1e-12, 0.5))
def test_improved_matches_dp_accounting(orders, data, delta):
    rdp = data.draw(st.lists(st.floats(0.0, 50.0), min_size=len(orders), max_size=len(orders)))
    eps, order = rdp_mod.eps_from_rdp(orders, rdp, delta, "improved")
    want, want_order = rdp_privacy_accountant.compute_epsilon(orders, rdp, delta)
    assert eps == pytest.approx(want, rel=1e-10, abs=1e-12)


def test_improved_is_never_worse_than_classic():
    orders = rdp_mod.DEFAULT_ORDERS
    rng = np.random.default_rng(0)
    for _ in range(50):
        curve = rng.uniform(0, 3) * orders / rng.uniform(1, 100)
        delta = 10 ** rng.uniform(-10, -2)
        assert rdp_mod.eps_from_rdp(orders, curve, delta, "improved")[0] <= rdp_mod.eps_from_rdp(
            orders, curve, delta, "classic"
        )[0] + 1e-12


def test_edge_rules_match_dp_accounting():
    # tiny ρ: TV ≤ δ, ε = 0; order ≤ 1.01: ∞ (dp_accounting's numerical guard)
    assert rdp_mod.eps_from_rdp([2.0], [1e-14], 1e-5, "improved")[0] == 0.0
    assert rdp_mod.eps_from_rdp([1.005], [0.1], 1e-5, "improved")[0] == math.inf
    assert rdp_privacy_accountant.compute_epsilon([1.005], [0.1], 1e-5)[0] == math.inf


def test_broadcasts_over_leading_axes():
    orders = np.array([2.0, 4.0, 8.0])
    curves = np.array([[0.1, 0.3, 0.9], [1.0, 2.0, 3.0]])
    eps, order = rdp_mod.eps_from_rdp(orders, curves, 1e-5)
    for i in range(2):
        e, o = loop_classic(orders, curves[i], 1e-5)
        assert eps[i] == pytest.approx(e) and order[i] == o


def test_gaussian_composition_matches_rdp_accountant():
    """N Gaussian mechanisms (noise multiplier z): N·λ/(2z²), converted like dp-accounting."""
    orders = list(rdp_mod.DEFAULT_ORDERS)
    for z, n in [(0.8, 1), (5.0, 100), (70.0, 10_000)]:
        acc = rdp_privacy_accountant.RdpAccountant(orders)
        acc.compose(dp_accounting.GaussianDpEvent(z), n)
        curve = n * np.asarray(orders) / (2 * z * z)
        np.testing.assert_allclose(acc._rdp, curve, rtol=1e-12)
        assert rdp_mod.eps_from_rdp(orders, curve, 1e-5, "improved")[0] == pytest.approx(acc.get_epsilon(1e-5))


def test_compose_adds():
    np.testing.assert_allclose(rdp_mod.compose([1.0, 2.0], [0.5, 0.5], 1.0), [2.5, 3.5])


@pytest.mark.parametrize(
    "orders, rdp, delta, conversion",
    [
        ([1.0, 2.0], [0.1, 0.2], 1e-5, "classic"),
        ([2.0], [0.1, 0.2], 1e-5, "classic"),
        ([2.0], [-0.1], 1e-5, "classic"),
        ([2.0], [0.1], 0.0, "classic"),
        ([2.0], [0.1], 1.0, "classic"),
        ([2.0], [0.1], 1e-5, "magic"),
        ([], [], 1e-5, "classic"),
    ],
)
def test_bad_input_raises_pate_error(orders, rdp, delta, conversion):
    with pytest.raises(PateError):
        rdp_mod.eps_from_rdp(orders, rdp, delta, conversion)
