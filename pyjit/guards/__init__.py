"""Guards: sources, guard kinds, guard sets and their compilation into pyjit._C.GuardTree."""
