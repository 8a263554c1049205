"""pyjit's support for ``torch.distributed`` wrappers.

``torch.distributed`` stays the engine for communication; this package only decides how pyjit
compiles code that runs inside it. ``ddp.py`` owns DistributedDataParallel: compiling the
wrapped module while DDP's own Python runs natively, and splitting the captured graph at DDP's
gradient-bucket boundaries so each bucket's all-reduce can start while earlier backward work
still runs. Other modules of this package (collectives, FSDP) are independent of it.
"""
