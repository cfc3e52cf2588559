"""The seed's command line, kept as an alias: ``python run_generation_cache.py CONFIG.json [options]`` is
``gencache generate CONFIG.json [options]``."""

import sys

from gencache.cli.app import main

if __name__ == "__main__":
    main(["generate", *sys.argv[1:]])
