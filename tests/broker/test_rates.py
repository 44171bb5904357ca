"""RateMeter: per-second rates of growing counters over a sliding window (a fake clock)."""

from __future__ import annotations

import pytest

from broker.rates import RateMeter


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_rate_is_the_growth_since_the_oldest_sample_in_the_window() -> None:
    clock = Clock()
    meter = RateMeter((0, 0), window_s=10, clock=clock)
    clock.now += 2
    assert meter.rates((100, 1000)) == (50.0, 500.0)
    for second in range(1, 21):  # steady 10 messages per second, sampled every second
        clock.now = 102 + second
        meter.sample((100 + 10 * second, 0))
    assert meter.rates((300, 0))[0] == pytest.approx(10.0)


def test_rate_drops_to_zero_once_the_window_has_passed_without_growth() -> None:
    clock = Clock()
    meter = RateMeter((0,), window_s=10, clock=clock)
    clock.now += 1
    meter.sample((500,))
    for _ in range(11):
        clock.now += 1
        meter.sample((500,))
    assert meter.rates((500,)) == (0.0,)


def test_a_counter_that_went_down_reads_as_rate_zero() -> None:
    clock = Clock()
    meter = RateMeter((50,), clock=clock)
    clock.now += 1
    assert meter.rates((10,)) == (0.0,)


def test_samples_closer_than_half_a_second_are_skipped() -> None:
    clock = Clock()
    meter = RateMeter((0,), window_s=1, clock=clock)
    clock.now += 0.1
    meter.sample((1000,))  # skipped: the window still starts at the initial sample
    clock.now += 1.9
    assert meter.rates((1000,)) == (500.0,)


def test_an_idle_meter_keeps_two_samples_however_long_it_idles() -> None:
    clock = Clock()
    meter = RateMeter((7, 7), window_s=10, clock=clock)
    for _ in range(100):  # 100 s of samples with unchanged counters
        clock.now += 1
        meter.sample((7, 7))
    assert len(meter._samples) == 2
    assert meter.rates((7, 7)) == (0.0, 0.0)


def test_growth_after_a_long_idle_spreads_over_the_window_only() -> None:
    clock = Clock()
    meter = RateMeter((0,), window_s=10, clock=clock)
    for _ in range(100):
        clock.now += 1
        meter.sample((0,))
    clock.now += 0.9  # 500 messages arrive before the next sample
    assert meter.rates((500,))[0] == pytest.approx(50.0)  # 500 over the 10 s window
    for second in range(1, 21):  # then 10 per second
        clock.now += 1
        meter.sample((500 + 10 * second,))
    assert meter.rates((700,))[0] == pytest.approx(10.0, rel=0.1)
