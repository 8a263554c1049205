"""tests/bytecode: torch-free tests of pyjit.bytecode (run under 3.11, 3.12 and 3.13).

The corpus and helper modules live next to the tests; this folder has no ``__init__.py`` (a
package named ``bytecode`` could shadow an installed one), so it is put on ``sys.path`` here.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
