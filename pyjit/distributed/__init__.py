"""pyjit around ``torch.distributed``: collectives traced into graphs (:mod:`.collectives`) and
FSDP-managed modules run between compiled regions (:mod:`.fsdp`). ``torch.distributed`` stays the
engine; pyjit only decides what is traced and what runs natively."""
