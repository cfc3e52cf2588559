"""``python -m gencache``: the same CLI as the ``gencache`` command."""

from gencache.cli.entry import main

if __name__ == "__main__":
    main()

__all__: list[str] = []
