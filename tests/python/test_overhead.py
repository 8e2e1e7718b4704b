"""The overhead probe (python -m rewy._overhead) runs and reports sane numbers."""
from rewy._overhead import measure


def test_overhead_probe_runs():
    r = measure(repeat=20, warmup=5)
    for key in ("api_forward", "bare_forward", "api_backward", "bare_backward", "floor_forward", "floor_backward"):
        assert r[key] > 0, key
    assert r["overhead_forward"] == r["api_forward"] - r["bare_forward"]
