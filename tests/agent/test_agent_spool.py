import json
import subprocess
import sys

import pytest
from agent_testkit import env

from trainsentry.agent.spool import MAX_SAMPLES_PER_BATCH, Spool, SpoolError
from trainsentry.telemetry.base import Reading
from trainsentry.wire.batch import GENESIS_PREV, digest, parse_batch, verify

KEY = "11" * 32


def samples(n, t0=1_800_000_000.0, dev="eth0"):
    return [{"dev": dev, "kind": "net", "t": t0 + i * 0.1, "m": {"net_tx_bytes": 100 * i}} for i in range(n)]


def test_batches_form_a_signed_hash_chain(tmp_path):
    sp = Spool(tmp_path / "s.db", "node-a", KEY)
    for i in range(3):
        assert sp.append(samples(4, t0=1e9 + i), 1.0) == i
    prev = GENESIS_PREV
    for seq in range(3):
        b = sp.get(seq)
        parsed = parse_batch(b.body)
        assert (parsed.seq, parsed.prev, parsed.node, parsed.gap_from) == (seq, prev, "node-a", None)
        assert verify(KEY, b.body, b.signature)
        prev = digest(b.body)
    assert sp.last_digest == prev and sp.next_seq == 3


def test_restart_continues_the_chain_and_keeps_bytes_identical(tmp_path):
    sp = Spool(tmp_path / "s.db", "node-a", KEY)
    sp.append(samples(5), 1.0)
    sp.append(samples(5), 1.0)
    before = [sp.get(s) for s in (0, 1)]
    sp.ack_below(1)
    sp.close()
    sp = Spool(tmp_path / "s.db", "node-a", KEY)
    assert sp.pending_seqs() == [1]
    assert sp.get(1) == before[1]                  # resent byte-identical, same signature
    assert sp.append(samples(2), 1.0) == 2
    assert parse_batch(sp.get(2).body).prev == digest(before[1].body)


def test_staged_ticks_survive_a_crash_and_are_sealed_in_order(tmp_path):
    sp = Spool(tmp_path / "s.db", "node-a", KEY)
    sp.stage(samples(3, t0=1))
    sp.stage(samples(3, t0=2))
    sp._db.close()  # no seal, no clean close: what SIGKILL leaves behind
    sp = Spool(tmp_path / "s.db", "node-a", KEY)
    assert sp.staged_samples() == 6
    assert sp.seal(1.0) == [0]
    assert [s["t"] for s in parse_batch(sp.get(0).body).samples] == [s["t"] for s in samples(3, 1) + samples(3, 2)]
    assert sp.staged_samples() == 0 and sp.seal(1.0) == []


def test_a_large_seal_is_split_below_the_wire_limits(tmp_path):
    sp = Spool(tmp_path / "s.db", "node-a", KEY)
    sp.stage(samples(MAX_SAMPLES_PER_BATCH + 10))
    assert sp.seal(1.0) == [0, 1]
    assert sp.pending_stats()[:2] == (2, MAX_SAMPLES_PER_BATCH + 10)
    assert parse_batch(sp.get(1).body).prev == digest(sp.get(0).body)


def test_another_nodes_spool_is_refused(tmp_path):
    Spool(tmp_path / "s.db", "node-a", KEY).close()
    with pytest.raises(SpoolError, match="node-a"):
        Spool(tmp_path / "s.db", "node-b", KEY)


def test_a_file_that_is_not_a_spool_is_refused(tmp_path):
    p = tmp_path / "s.db"
    p.write_bytes(b"not sqlite at all" * 100)
    with pytest.raises(SpoolError, match="not a usable spool"):
        Spool(p, "node-a", KEY)


def test_rechain_declares_the_gap_and_relinks_every_pending_batch(tmp_path):
    sp = Spool(tmp_path / "s.db", "node-a", KEY)
    for i in range(8):
        sp.append(samples(2, t0=i), 1.0)
    sp.ack_below(5)
    old = {s: parse_batch(sp.get(s).body) for s in (5, 6, 7)}
    assert sp.rechain(3) == 5
    new = {s: parse_batch(sp.get(s).body) for s in (5, 6, 7)}
    assert new[5].gap_from == 3 and new[6].gap_from is None
    assert new[5].prev == old[5].prev
    assert new[6].prev == new[5].digest and new[7].prev == new[6].digest
    assert all(new[s].samples == old[s].samples for s in new)
    assert all(verify(KEY, sp.get(s).body, sp.get(s).signature) for s in new)
    assert sp.last_digest == new[7].digest
    with pytest.raises(SpoolError):
        sp.rechain(5)


CRASHER = """
import sys
from trainsentry.agent.spool import Spool
sp = Spool(sys.argv[1], "node-a", "11" * 32)
i = 0
while True:
    seq = sp.append([{"dev": "eth0", "kind": "net", "t": float(i), "m": {"net_tx_bytes": i}}], 1.0)
    print(seq, flush=True)   # printed only after the commit returned
    i += 1
"""


def test_every_committed_batch_survives_sigkill(tmp_path):
    p = subprocess.Popen([sys.executable, "-c", CRASHER, str(tmp_path / "s.db")], stdout=subprocess.PIPE,
                         text=True, env=env())
    acked = []
    for line in p.stdout:
        acked.append(int(line))
        if len(acked) == 200:
            p.kill()
            break
    p.wait()
    sp = Spool(tmp_path / "s.db", "node-a", KEY)
    seqs = sp.pending_seqs()
    assert seqs[:200] == list(range(200)) and seqs == list(range(len(seqs)))
    assert sp.next_seq == len(seqs)
    assert sp.last_digest == digest(sp.get(seqs[-1]).body)
    json.loads(sp.get(seqs[-1]).body)


def test_a_sealed_batch_is_byte_identical_to_encoding_its_samples(tmp_path):
    """Seal splices the staged canonical JSON; the bytes must be exactly the wire encoder's."""
    from trainsentry.wire.batch import encode_batch
    sp = Spool(tmp_path / "s.db", "node-a", KEY)
    ticks = [samples(3, t0=1e9 + k) + [{"dev": "gpu0", "kind": "gpu", "t": 1e9 + k + 0.123456789,
                                         "m": {"power_mw": 80123, "gpu_util_pct": 12.5, "nvlink_tx_kib": 2**63 - 1,
                                               "gpm_sm_util_pct": 0.1 + 0.2, "energy_mj": 3039642}}]
             for k in range(4)]
    for tick in ticks:
        sp.stage(tick)
    sp.stage([])                                   # an empty tick stages nothing
    assert sp.staged_samples() == 16
    [seq] = sp.seal(0.4, created=1e9 + 5)
    body = sp.get(seq).body
    assert body == encode_batch("node-a", 0, GENESIS_PREV, [s for t in ticks for s in t], created=1e9 + 5, interval_s=0.4)
    assert parse_batch(body).samples == json.loads(json.dumps([s for t in ticks for s in t]))
    assert sp.get(seq).n_samples == 16 and verify(KEY, body, sp.get(seq).signature)


def test_ticks_staged_by_an_older_agent_still_seal(tmp_path):
    """A spool whose staged table predates the sample count (text not canonical): decoded, re-encoded."""
    import sqlite3
    path = tmp_path / "s.db"
    Spool(path, "node-a", KEY).close()
    db = sqlite3.connect(path)
    db.execute("DROP TABLE staged")
    db.execute("CREATE TABLE staged (id INTEGER PRIMARY KEY, samples TEXT NOT NULL)")
    db.execute("INSERT INTO staged(samples) VALUES (?)", (json.dumps(samples(3, t0=7)),))   # keys unsorted
    db.commit()
    db.close()
    sp = Spool(path, "node-a", KEY)
    sp.stage(samples(2, t0=8))
    assert sp.staged_samples() == 5
    [seq] = sp.seal(1.0)
    assert [s["t"] for s in parse_batch(sp.get(seq).body).samples] == [7.0, 7.1, 7.2, 8.0, 8.1]


def test_chain_writes_commit_with_full_sync_and_staging_touches_no_database(tmp_path):
    sp = Spool(tmp_path / "s.db", "node-a", KEY)
    seen = []
    sp._db.set_trace_callback(seen.append)
    sp.stage(samples(2))
    assert seen == []                                              # one line appended to the tick log
    assert (tmp_path / "s.db-ticks").read_text().startswith("1 2 [{")
    sp.seal(1.0)
    assert seen[0] == "PRAGMA synchronous=FULL" and seen[1] == "BEGIN IMMEDIATE"
    assert seen[-2:] == ["COMMIT", "PRAGMA synchronous=NORMAL"]
    assert (tmp_path / "s.db-ticks").read_text() == ""             # emptied once the batch is committed


def test_a_kill_between_the_seal_commit_and_emptying_the_log_seals_nothing_twice(tmp_path, monkeypatch):
    import os
    sp = Spool(tmp_path / "s.db", "node-a", KEY)
    sp.stage(samples(3, t0=1))
    monkeypatch.setattr(sp._ticks, "clear", lambda: None)          # "killed" right after the commit
    assert sp.seal(1.0) == [0]
    sp.stage(samples(2, t0=2))                                     # staged after that seal: kept
    sp._db.close()
    os.close(sp._ticks.fd)
    again = Spool(tmp_path / "s.db", "node-a", KEY)
    assert again.staged_samples() == 2
    assert again.seal(1.0) == [1]
    assert [s["t"] for s in parse_batch(again.get(1).body).samples] == [2.0, 2.1]
    again.stage(samples(1, t0=3))                                  # tick ids go on past the old ones
    assert again.seal(1.0) == [2] and again.staged_samples() == 0


def test_a_tick_torn_by_a_kill_in_mid_write_is_dropped_and_the_rest_kept(tmp_path):
    sp = Spool(tmp_path / "s.db", "node-a", KEY)
    sp.stage(samples(3, t0=1))
    sp.stage(samples(2, t0=2))
    sp.close()
    log = tmp_path / "s.db-ticks"
    log.write_bytes(log.read_bytes() + b'3 4 [{"dev":"eth0","ki')    # the third tick's write, cut short
    sp = Spool(tmp_path / "s.db", "node-a", KEY)
    assert sp.staged_samples() == 5
    sp.stage(samples(1, t0=4))                                     # appended after the cut, not glued to it
    assert sp.seal(1.0) == [0]
    assert [s["t"] for s in parse_batch(sp.get(0).body).samples] == [1.0, 1.1, 1.2, 2.0, 2.1, 4.0]


def test_a_seal_that_fails_rolls_back_keeps_the_ticks_and_restores_normal_sync(tmp_path, monkeypatch):
    import trainsentry.agent.spool as spool_mod
    sp = Spool(tmp_path / "s.db", "node-a", KEY)
    sp.stage(samples(3, t0=1))

    def broken_digest(body):   # fails after the batch row is inserted, before the chain state is
        raise OSError("digest failed")
    monkeypatch.setattr(spool_mod, "digest", broken_digest)
    with pytest.raises(OSError):
        sp.seal(1.0)
    assert sp._db.execute("PRAGMA synchronous").fetchone()[0] == 1       # NORMAL again after the FULL commit try
    assert sp.pending_stats() == (0, 0, 0, 0) and sp.next_seq == 0           # nothing half-written
    assert sp.staged_samples() == 3
    monkeypatch.undo()
    assert sp.seal(1.0) == [0]
    assert [s["t"] for s in parse_batch(sp.get(0).body).samples] == [1.0, 1.1, 1.2]


def _json_cases():
    import collections
    import enum
    import math

    import types

    import numpy as np

    class Level(enum.IntEnum):
        HIGH = 3

    gpu = {"dev": "gpu0", "kind": "gpu", "t": 1800000000.399999,
           "m": {"nvlink_tx_kib": 2**64 - 1, "nvlink_rx_kib": 0, "power_mw": 78736, "gpu_util_pct": 0.0,
                 "mem_util_pct": 100.0, "gpm_sm_util_pct": 0.1 + 0.2, "energy_mj": -5, "x": -0.0, "y": 1e-300,
                 "z": 1.7976931348623157e308}}
    ok = [[gpu], samples(4), [], [{"dev": "mlx5_0:1", "kind": "ib", "t": 7, "m": {}}],
          [{"dev": "eth0", "kind": "net", "t": 1.5, "m": {"only": 3}}],
          [{"dev": "é\"\\\n%s", "kind": "gpu%", "t": 2.0, "m": {"a%rb": 1, "%%": 2.5, "ü\u2028": 3, "": 4}}],
          [{"m": {"b": 1, "a": 2}, "t": 3.25, "kind": "net", "dev": "eth1"}],          # keys in another order
          [{"dev": "g", "kind": "gpu", "t": 1.0, "m": {"n": np.float64(1.5), "e": Level.HIGH}}],   # number subclasses
          [{"dev": "g", "kind": "gpu", "t": 1.0, "m": {"on": True, "off": False, "none": None, "s": "text"}}],
          [{"dev": "g", "kind": "gpu", "t": True, "m": {"a": 1}}],
          [{"dev": "g", "kind": "gpu", "t": 1.0, "m": {"big": 10**400, "f": 1.0}}],    # the sum overflows
          [{"dev": "g", "kind": "gpu", "t": 1.0, "m": {"a": 1e308, "b": 1e308}}],      # ...or goes infinite
          [{"dev": "g", "kind": "gpu", "t": 1.0, "m": {1: 2}}],
          [{"dev": "g", "kind": "gpu", "t": 1.0, "m": {"a": 1}, "extra": 0}],
          [{"dev": "g", "kind": "gpu", "m": {"a": 1}, "extra": 0}],
          [{"dev": 5, "kind": "gpu", "t": 1.0, "m": {"a": 1}}],
          [gpu, {"dev": "g", "kind": "gpu", "t": 1.0, "m": {"a": [1, 2]}}],
          [{"dev": "g", "kind": "gpu", "t": 1.0, "m": collections.OrderedDict(b=1, a=2.5)}],
          [{"dev": "g", "kind": "gpu", "t": 1.0, "m": ["a", "b"]}], [{"dev": "g", "kind": "gpu", "t": 1.0, "m": "ab"}]]
    refused = [[{"dev": "g", "kind": "gpu", "t": 1.0, "m": types.MappingProxyType({"a": 1})}],
               [{"dev": "g", "kind": "gpu", "t": 1.0, "m": {"a": math.nan}}],
               [{"dev": "g", "kind": "gpu", "t": math.inf, "m": {"a": 1}}],
               [gpu, {"dev": "g", "kind": "gpu", "t": 1.0, "m": {"a": -math.inf}}],
               [{"dev": "g", "kind": "gpu", "t": 1.0, "m": {"a": 1, 2: 3}}]]
    return ok, refused


def test_staged_json_is_the_canonical_encoders_text():
    """encode_samples (staging's fast path) writes exactly what the canonical encoder writes, and
    refuses what it refuses; twice, so the cached templates are used as well as made."""
    import trainsentry.agent.spool as spool_mod
    ok, refused = _json_cases()
    for _ in range(2):
        for case in ok:
            assert spool_mod.encode_samples(case) == spool_mod._CANONICAL.encode(case), case
        for case in refused:
            with pytest.raises((ValueError, TypeError)) as got:
                spool_mod.encode_samples(case)
            with pytest.raises(got.type):
                spool_mod._CANONICAL.encode(case)
        # encode_readings: the same from Reading objects (the agent's staging path)
        for case in ok + refused:
            if not all(set(s) == {"dev", "kind", "t", "m"} for s in case):
                continue
            readings = [Reading(s["dev"], s["kind"], s["t"], s["m"]) for s in case]
            try:
                want = spool_mod._CANONICAL.encode(case)
            except (ValueError, TypeError) as e:
                with pytest.raises(type(e)):
                    spool_mod.encode_readings(readings)
            else:
                assert spool_mod.encode_readings(readings) == want, case


def test_staged_json_of_the_agents_readings_is_the_canonical_encoders_text():
    """The agent's own ticks (8 fake GPUs, the sysfs fixture's network devices, 30 s of readings with
    energy, slow gauges and GPM coming and going) through the fast path."""
    from pathlib import Path

    from fakes.fake_pynvml import FakeNvml, ManualClock

    import trainsentry.agent.spool as spool_mod
    from trainsentry.telemetry import open_sources
    clock = ManualClock()
    sysfs = Path(__file__).resolve().parents[1] / "fixtures" / "sysfs" / "node1"
    sources = open_sources(["nvml", "net"], nvml_module=FakeNvml(gpu_count=8, clock=clock, start=clock() - 3.0),
                           clock=clock, net_sysfs_root=str(sysfs))
    for _ in range(300):
        readings = [r for src in sources for r in src.read()]
        tick = [r.to_wire() for r in readings]
        text = spool_mod._CANONICAL.encode(tick)
        assert spool_mod.encode_samples(tick) == text == spool_mod.encode_readings(readings)
        clock.advance(0.1)


def test_staging_readings_writes_the_line_staging_their_wire_samples_writes(tmp_path):
    readings = [Reading("gpu0", "gpu", 1e9 + 0.25, {"power_mw": 80123, "gpu_util_pct": 12.5}),
                Reading("eth0", "net", 1e9 + 0.5, {"net_tx_bytes": 7})]
    a, b = Spool(tmp_path / "a.db", "node-a", KEY), Spool(tmp_path / "b.db", "node-a", KEY)
    a.stage([r.to_wire() for r in readings])
    b.stage_readings(readings)
    b.stage_readings([])                          # an empty tick stages nothing
    assert (tmp_path / "a.db-ticks").read_bytes() == (tmp_path / "b.db-ticks").read_bytes()
    assert a.seal(1.0, created=5.0) == b.seal(1.0, created=5.0) == [0]
    assert a.get(0).body == b.get(0).body
