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
