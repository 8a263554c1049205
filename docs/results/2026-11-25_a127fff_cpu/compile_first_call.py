import os, sys, time, tempfile
os.environ["TORCHINDUCTOR_CACHE_DIR"] = tempfile.mkdtemp()
os.environ["PYJIT_CACHE_DIR"] = tempfile.mkdtemp()
sys.path.insert(0, os.getcwd())
import torch, torch.nn.functional as F
import pyjit
torch.set_num_threads(1)
def pointwise(a, b): return torch.relu(torch.tanh(a * b + 1) * torch.sigmoid(b)) + a
def softmax(x): return torch.softmax(x, -1)
def layer_norm(x, w, b): return F.layer_norm(x, (1024,), w, b)
def block(x, w, b):
    for _ in range(4):
        x = F.layer_norm(x + F.gelu(x @ w), (64,), b, b)
    return x.softmax(-1)
cases = [(pointwise, [torch.randn(262144), torch.randn(262144)]), (softmax, [torch.randn(256, 1024)]),
         (layer_norm, [torch.randn(256, 1024), torch.randn(1024), torch.randn(1024)]),
         (block, [torch.randn(16, 64), torch.randn(64, 64), torch.randn(64)])]
which = sys.argv[1]
# warm both stacks on a tiny unrelated graph so one-time imports are not counted
warm = (lambda f: pyjit.jit(f)) if which == "pyjit" else (lambda f: torch.compile(f))
warm(lambda t: t * 3 - 1)(torch.randn(5))
for fn, args in cases:
    f = warm(fn)
    t = time.perf_counter(); f(*args); first = time.perf_counter() - t
    t = time.perf_counter(); f(*args); steady = time.perf_counter() - t
    print(which, fn.__name__, "first-call compile %.2f s" % (first - steady), flush=True)
