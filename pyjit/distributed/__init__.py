"""pyjit around ``torch.distributed``.

``torch.distributed`` stays the engine for communication; this package only decides how pyjit
compiles code that runs inside it:

- ``ddp.py``: DistributedDataParallel: compiling the wrapped module while DDP's own Python runs
  natively, and splitting the captured graph at DDP's gradient-bucket boundaries so each bucket's
  all-reduce can start while earlier backward work still runs;
- ``collectives.py``: collectives traced into graphs (functional op + wait, in-place semantics);
- ``fsdp.py``: FSDP-managed modules run between compiled regions.
"""
