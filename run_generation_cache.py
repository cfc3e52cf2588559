"""The seed's command line, kept as a thin alias: ``python run_generation_cache.py CONFIG.json [options]`` is
``gencache generate CONFIG.json [options]``, signals included (:func:`gencache.cli.main`)."""

import sys

from gencache.cli import main

if __name__ == "__main__":
    main(["generate", *sys.argv[1:]])
