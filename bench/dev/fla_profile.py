"""FLA's kernels, one forward + one backward of an op at one shape, per kernel (torch.profiler), after
a warm-up that includes Triton's autotuning. Device-only (FLA under .ref/, never committed).
    FLA_DISABLE_BACKEND_DISPATCH=1 PYTHONPATH=.ref/fla-src python3 bench/dev/fla_profile.py gdn 8x2048x32"""
import sys, time
import torch
sys.path.insert(0, "bench")
from bench_gpu import make_inputs, fla_fns, cuda_time
from torch.profiler import profile, ProfilerActivity

op, shape = sys.argv[1], sys.argv[2]
B, T, H = (int(v) for v in shape.split("x"))
x, do, dht = make_inputs(op, B, T, H, 128, 128)
fwd, prep, bwd, call, xg = fla_fns(op, x, do, dht)
t0 = time.time()
prep(); bwd(); fwd()
torch.cuda.synchronize()
print(f"# {op} {shape}: warm-up (autotune) {time.time() - t0:.0f} s", flush=True)
tf = cuda_time(fwd, 30)
tb = cuda_time(lambda: (prep(), bwd()), 30) - tf  # prep is a forward with autograd graph
print(f"fla fwd {tf:.3f} ms, fwd+graph+bwd - fwd {tb:.3f} ms")
for name, fn in (("fwd", fwd), ("bwd", bwd)):
    prep()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(5):
            fn()
        torch.cuda.synchronize()
    rows = [(e.device_time_total / 5 / 1000, e.count / 5, e.key) for e in prof.key_averages() if e.device_time_total > 0]
    rows.sort(reverse=True)
    print(f"per-kernel FLA {name} ({op} {shape}): ms per call, calls")
    for ms, n, k in rows[:14]:
        print(f"  {ms:8.4f} ms x{n:.0f}  {k[:90]}")
