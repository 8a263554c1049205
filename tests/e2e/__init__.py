"""End-to-end tests of the frontend against pyjit's public API only.

``corpus`` holds the function corpus with expected graph and op counts; ``support`` holds the
counting backend and the eager-vs-jit comparison used by every test file here.
"""
