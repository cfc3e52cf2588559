"""The seed's command line, kept as a thin alias: ``python run_generation_cache.py CONFIG.json [options]``.

Equivalent to ``gencache generate CONFIG.json [options]``.
"""

import sys

from gencache.cli import run

if __name__ == "__main__":
    sys.exit(run(["generate", *sys.argv[1:]]))
