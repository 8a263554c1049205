"""A package whose module imports its sibling relatively inside a jitted function."""
