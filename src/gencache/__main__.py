"""``python -m gencache``: the same CLI as the ``gencache`` command (:func:`gencache.cli.main`)."""

from gencache.cli import main

if __name__ == "__main__":
    main()
