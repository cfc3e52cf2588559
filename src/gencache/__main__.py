"""``python -m gencache``: the ``gencache`` command line."""

from gencache.cli.app import main

if __name__ == "__main__":
    main()
