"""`python -m book.sync [--check | --write | --compact-history]`: the drift check's command.

The check itself is the run layer's (book/run/sync.py), where the book's Sphinx extension and the
tests import it; this module only keeps the command's name.
"""

from __future__ import annotations

import sys

from book.run.sync import main

if __name__ == "__main__":
    sys.exit(main())
