"""Tests of pyjit's compiler backend (CPU through Triton's interpreter, and CUDA when present)."""
