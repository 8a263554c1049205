"""The symbolic bytecode interpreter: translator, opcode handlers, FX graph output, generated code."""
