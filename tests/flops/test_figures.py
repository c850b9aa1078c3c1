"""The figures flops-eval writes: readable estimator names, axes in plain numbers, tick labels that never overlap."""

import itertools
import re

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

from trainsentry.flops.dataset import load_runs  # noqa: E402
from trainsentry.flops.estimators import ESTIMATORS, Estimator, FitFailure  # noqa: E402
from trainsentry.flops.evaluate import run_protocol  # noqa: E402
from trainsentry.flops.markdown import ITEMS, LABELS  # noqa: E402
from trainsentry.flops.report import errors_figure, est_vs_true_figure, log_ticks, plain  # noqa: E402

PLAIN = re.compile(r"^\d+(\.\d+)?$")  # no sign, no exponent, no mathtext


@pytest.fixture(scope="module")
def result(synth_root):
    """The protocol on the synthetic runs, with power only refusing on odd splits and one run estimated far off."""
    import trainsentry.flops.evaluate as ev
    real = ev.make

    def make(name, seed=0):
        if name == "power_only" and seed % 2:
            class Refuses(Estimator):
                def fit(self, X, y):
                    raise FitFailure("test: cannot calibrate", f"odd split {seed}")
            return Refuses()
        return real(name, seed=seed)
    ev.make = make
    try:
        res = run_protocol(load_runs(synth_root), ESTIMATORS, n_splits=6)
    finally:
        ev.make = real
    res.pop("_held_out_pct_errors")
    res["per_run"][0]["residual_mlp"] = 1e9  # an estimate floored at 1 GFLOP: off any sensible scale
    res["target_median_abs_pct_error"] = 5.0
    return res


def test_every_estimator_has_its_own_readable_name():
    assert set(LABELS) == set(ITEMS) == set(ESTIMATORS)
    assert len(set(LABELS.values())) == len(LABELS)
    assert not any(re.match(r"\(\w\)", v) for v in LABELS.values())  # no "(e)" twice: letters live in ITEMS


def _labels(ticklabels):
    return [t for t in ticklabels if t.get_visible() and t.get_text()]


def _no_overlap(fig, ticklabels):
    fig.canvas.draw()
    r = fig.canvas.get_renderer()
    boxes = [t.get_window_extent(r) for t in ticklabels]
    for a, b in itertools.combinations(boxes, 2):
        assert not a.overlaps(b), (a, b)


def test_est_vs_true_ticks_are_plain_and_apart(result):
    fig = est_vs_true_figure(plt, result)
    try:
        panels = [ax for ax in fig.axes if ax.get_visible() and ax.has_data()]
        assert len(panels) == len(ESTIMATORS)
        for ax in panels:
            for labels in (_labels(ax.get_xticklabels()), _labels(ax.get_yticklabels())):
                assert len(labels) >= 2
                assert all(PLAIN.match(t.get_text()) for t in labels), [t.get_text() for t in labels]
                _no_overlap(fig, labels)
            assert "units of 1e" in (ax.get_xlabel() + ax.get_ylabel()) or ax.get_xlabel() == ax.get_ylabel() == ""
        titles = [ax.get_title() for ax in panels]
        assert [t.split("\n")[0] for t in titles] == [LABELS[n] for n in ESTIMATORS]
        assert any("3 of 6 splits failed" in t for t in titles)
        # the floored estimate is drawn on the edge and said to be off the scale, not stretching the axes
        legends = [t.get_text() for ax in panels if ax.get_legend() for t in ax.get_legend().get_texts()]
        assert "1 off the scale, drawn at its edge" in legends
        lo, hi = panels[0].get_xlim()
        assert hi / lo < 100
    finally:
        plt.close(fig)


def test_error_axis_is_positive_plain_percent(result):
    fig = errors_figure(plt, result)
    try:
        ax = fig.axes[0]
        ys = _labels(ax.get_yticklabels())
        assert ys and all(PLAIN.match(t.get_text()) and float(t.get_text()) > 0 for t in ys), \
            [t.get_text() for t in ys]
        assert ax.get_yscale() == "log" and ax.get_ylim()[0] > 0
        xs = _labels(ax.get_xticklabels())
        assert [t.get_text().split("\n(")[0].replace("\n", " ") for t in xs] == [LABELS[n] for n in ESTIMATORS]
        assert "3 of 6 splits failed" in xs[ESTIMATORS.index("power_only")].get_text()
        _no_overlap(fig, xs)
        _no_overlap(fig, ys)
    finally:
        plt.close(fig)


@pytest.mark.parametrize("lo,hi", [(1.0e16, 7.8e16), (2e9, 3e17), (0.9, 1.1), (3e15, 2e17)])
def test_log_ticks_are_few_and_inside(lo, hi):
    t = log_ticks(lo, hi)
    assert 1 <= len(t) <= 6 and all(lo <= v <= hi for v in t) and t == sorted(t)
    assert all(PLAIN.match(plain(v / 10 ** np.floor(np.log10(v)))) for v in t)
