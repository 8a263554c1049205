"""Online exp-sum on/off in the C++ generator (docs/performance.md, CPU C++ generator): process CPU
time per call, one thread, median of 5 x 200 calls; fresh graph caches under /tmp."""
import os, sys, time, torch
sys.path.insert(0, os.getcwd())
import pyjit.backend as backend
from pyjit import config as cfg
from pyjit.backend.codegen import cpp
torch.set_num_threads(1)
F = torch.nn.functional
cases = {
 "softmax[256,1024]": (lambda t: torch.softmax(t, -1), [torch.randn(256, 1024)]),
 "softmax[64,16384]": (lambda t: torch.softmax(t, -1), [torch.randn(64, 16384)]),
 "log_softmax[64,16384]": (lambda t: torch.log_softmax(t, -1), [torch.randn(64, 16384)]),
 "log_softmax[256,1024]": (lambda t: torch.log_softmax(t, -1), [torch.randn(256, 1024)]),
 "ce[256,1000]": (lambda t, y: F.cross_entropy(t, y), [torch.randn(256, 1000), torch.randint(0, 1000, (256,))]),
 "ce[32,16000]": (lambda t, y: F.cross_entropy(t, y), [torch.randn(32, 16000), torch.randint(0, 16000, (32,))]),
 "lse[256,1024]": (lambda t: torch.logsumexp(t, -1), [torch.randn(256, 1024)]),
}
def bench(f, inp, n=200):
    for _ in range(10): f(*inp)
    best = []
    for _ in range(5):
        t = time.process_time()
        for _ in range(n): f(*inp)
        best.append((time.process_time() - t) / n * 1e6)
    return sorted(best)[2]
for name, (fn, inp) in cases.items():
    row = [name, f"eager {bench(fn, inp):.1f}"]
    for online in (False, True):
        cpp.ONLINE_EXP_SUM = online
        with cfg.patch(cpu_backend="cpp", raise_on_internal_error=True, cache_dir=f"/tmp/pyjit-online-{os.getpid()}-{online}"):
            c = backend.compile_fx(torch.fx.symbolic_trace(fn), inp)
        torch.testing.assert_close(c(*inp), fn(*inp))
        row.append(f"{'online' if online else '3pass'} {bench(c, inp):.1f}")
    print("  ".join(row), flush=True)
