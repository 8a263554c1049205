"""pyjit's runtime: the on-disk cache of generated modules (``cache``), loading and launching
them (``launcher``, ``triton_compat``), and buffer lifetimes for wrappers (``allocator``).
Importing this package imports nothing heavy; torch/Triton are imported where used."""
