import pytest

from flops.fixtures.probe_traces import probe_ddp_trace, synthetic_runs


@pytest.fixture(scope="session")
def probe_run(tmp_path_factory):
    return probe_ddp_trace(tmp_path_factory.mktemp("probe") / "probe-ddp")


@pytest.fixture(scope="session")
def synth_root(tmp_path_factory):
    root = tmp_path_factory.mktemp("synth")
    synthetic_runs(root)
    return root


@pytest.fixture(scope="session")
def recorded_runs(tmp_path_factory):
    """The 2 x H200 recording (real GPM, clocks, energy) as runs over its DDP and matmul phases."""
    from flops.fixtures.probe_traces import recorded_trace
    root = tmp_path_factory.mktemp("recorded")
    return {ph: recorded_trace(root / ph, ph) for ph in ("ddp_100M_40steps", "matmul_bf16_8192_4s")}
