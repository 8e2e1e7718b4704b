"""bench/bench_api.py (issue 24's acceptance benchmark): its pipeline on the CPU, and its acceptance lines."""
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "bench"))

import bench_api  # noqa: E402


def test_selftest():
    """rewy's public functions under three names (R, A, WY), both operators, two shapes: every row measured and
    the outputs the same"""
    env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "python"))
    r = subprocess.run([sys.executable, os.path.join(ROOT, "bench", "bench_api.py"), "--selftest"], env=env,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and "selftest: passed" in r.stdout, r.stdout[-3000:] + r.stderr[-3000:]


def fake(times):
    """results from {(op, shape, impl): (fwd GB, bwd GB, peak)}"""
    return {key: dict(fwd_gb_ms=f, bwd_gb_ms=b, peak_mib=m) for key, (f, b, m) in times.items()}


def verdicts(res, shapes):
    return {name: v for name, _, v in bench_api.acceptance(res, shapes)}


def test_acceptance_lines():
    shapes = bench_api.SUITE
    t = {}
    for s in shapes:   # rewy 1.2× FlashQLA and 3× FLA backward, 1.1× and 2× forward, less memory
        for op in bench_api.OPS:
            t[(op, s, "rewy")] = (1.0, 1.0, 100.0)
            t[(op, s, "flashqla")] = (1.1, 1.2, 150.0)
            t[(op, s, "fla")] = (2.0, 3.0, 200.0)
    v = verdicts(fake(t), shapes)
    assert set(v.values()) == {"PASS"}, v
    # the memory lines also give saved + peak (the backward's whole footprint) where the forward's share is known
    res = fake(t)
    res[("gdn", (4, 4096, 16), "rewy")]["saved_mib"] = 40.0
    res[("gdn", (4, 4096, 16), "flashqla")]["saved_mib"] = 10.0
    text = {name: x for name, x, _ in bench_api.acceptance(res, shapes)}
    assert text["GDN peak backward MiB at (4, 4096, 16)"].endswith("saved + peak: 140.0, 160.0)"), text
    # one shape at 0.85× FlashQLA in the GDN backward: the geomean still ≥ 1, the floor of 0.9 is not
    t[("gdn", shapes[1], "flashqla")] = (1.1, 0.85, 150.0)
    # rewy's peak above FlashQLA's at (4,4096,16)
    t[("gdn", (4, 4096, 16), "rewy")] = (1.0, 1.0, 151.0)
    v = verdicts(fake(t), shapes)
    assert v["GDN backward R, GPU-bound, × FlashQLA"] == "FAIL"
    assert v["GDN peak backward MiB at (4, 4096, 16)"] == "FAIL"
    assert v["GDN peak backward MiB at (1, 8192, 16)"] == "PASS"
    assert v["GDN backward R, GPU-bound, × FLA"] == "PASS"
    # FlashQLA missing altogether: its lines say so, the FLA lines still judge
    v = verdicts(fake({k: x for k, x in t.items() if k[2] != "flashqla"}), shapes)
    assert v["GDN backward R, GPU-bound, × FlashQLA"] == "n.a." and v["DeltaNet backward, GPU-bound, × FLA"] == "PASS"
    # a shape missing for FLA: not a pass over the suite
    v = verdicts(fake({k: x for k, x in t.items() if not (k[2] == "fla" and k[1] == shapes[0])}), shapes)
    assert v["DeltaNet backward, GPU-bound, × FLA"] == "partial"
