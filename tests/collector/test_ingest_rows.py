"""Rows built per device kind (store._kind_rows) and the general fallback store the same values.

The fast path assumes every device of a kind reports one metric set and takes values by name; these
batches break that assumption in every way the wire allows (keys in another order, another set of
the same size, sets of other sizes, a single metric, none) and check each stored row against its
sample.
"""

from __future__ import annotations

import random
import sqlite3

import pytest
from conftest import counts

from trainsentry.collector.schema import SAMPLE_METRICS
from trainsentry.collector.store import sample_rows


def _stored(db) -> dict[tuple[str, float], dict]:
    conn = sqlite3.connect(db)
    conn.row_factory = sqlite3.Row
    rows = conn.execute(f"SELECT device, kind, t, {', '.join(SAMPLE_METRICS)} FROM samples").fetchall()
    return {(r["device"], r["t"]): {k: r[k] for k in r.keys() if r[k] is not None} for r in rows}


def _check(db, samples: list[dict]) -> None:
    stored = _stored(db)
    assert len(stored) == len(samples)
    for s in samples:
        assert stored[(s["dev"], s["t"])] == {"device": s["dev"], "kind": s["kind"], "t": s["t"], **s["m"]}


def test_keys_in_another_order_are_bound_to_their_own_columns(agent, db):
    samples = [{"dev": "gpu0", "kind": "gpu", "t": 1.0, "m": {"power_mw": 1, "nvlink_tx_kib": 2, "energy_mj": 3}},
               {"dev": "gpu1", "kind": "gpu", "t": 1.0, "m": {"energy_mj": 6, "power_mw": 4, "nvlink_tx_kib": 5}}]
    # canonical JSON sorts keys, so send the body as an agent that does not: the MAC is over these bytes
    body = agent.body(samples).replace(b'"m":{"energy_mj":6,"nvlink_tx_kib":5,"power_mw":4}',
                                       b'"m":{"power_mw":4,"energy_mj":6,"nvlink_tx_kib":5}')
    assert b'"power_mw":4,"energy_mj":6' in body
    r = agent.post(body)
    assert r.status_code == 200, r.text
    _check(db, samples)


def test_metric_sets_of_one_size_or_none_take_the_general_path_or_the_fast_one_alike(agent, db):
    samples = [{"dev": "gpu0", "kind": "gpu", "t": 1.0, "m": {"power_mw": 1, "energy_mj": 2}},
               {"dev": "gpu1", "kind": "gpu", "t": 1.0, "m": {"power_mw": 3, "nvlink_tx_kib": 4}},  # same size
               {"dev": "eth0", "kind": "net", "t": 1.0, "m": {"net_tx_bytes": 5}},                  # one metric
               {"dev": "eth1", "kind": "net", "t": 1.0, "m": {"net_tx_bytes": 6}},
               {"dev": "ib0", "kind": "ib", "t": 1.0, "m": {}}]                                    # none
    pairs = sample_rows(1, samples)
    assert sum(len(rows) for _, rows in pairs) == len(samples)
    r = agent.send(samples)
    assert r.status_code == 200, r.text
    _check(db, samples)


@pytest.mark.parametrize("seed", range(5))
def test_random_batches_store_every_value_in_its_column(agent, db, seed):
    rng = random.Random(seed)
    kinds = {"gpu": ["power_mw", "energy_mj", "nvlink_tx_kib", "nvlink_rx_kib", "gpu_util_pct"],
             "net": ["net_tx_bytes", "net_rx_bytes"], "ib": ["net_tx_bytes", "net_rx_bytes"]}
    sent = []
    for b in range(4):
        sets = {k: [rng.sample(names, rng.randint(0, len(names))) for _ in range(rng.randint(1, 2))]
                for k, names in kinds.items()}
        samples = []
        for i in range(rng.randint(1, 40)):
            kind = rng.choice(sorted(kinds))
            names = rng.choice(sets[kind])
            samples.append({"dev": f"{kind}{rng.randint(0, 2)}", "kind": kind, "t": 1000.0 + b + i / 100,
                            "m": {n: rng.randint(0, 10 ** 12) for n in names}})
        r = agent.send(samples)
        assert r.status_code == 200, r.text
        sent += samples
    _check(db, sent)
    assert counts(db)["batches"] == 4
