"""The overhead probe (python -m rewy._overhead) runs and reports sane numbers."""
import pytest

from rewy._overhead import measure


def test_overhead_probe_runs():
    r = measure(repeat=20, warmup=5)
    for key in ("api_forward", "bare_forward", "api_backward", "bare_backward", "floor_forward", "floor_backward",
                "direct_backward"):
        assert r[key] > 0, key
    for d in ("forward", "backward"):
        assert r["overhead_" + d] == r["api_" + d] - r["bare_" + d]
        assert r["rewy_" + d] == pytest.approx(r["api_" + d] - r["bare_" + d] - r["floor_" + d])
    assert r["rewy_backward_direct"] == r["direct_backward"] - r["bare_backward"]
