"""Tests of the C core (pyjit._C): hook, cache, guards, leaks, build. Torch-free unless marked."""
