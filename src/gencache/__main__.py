"""``python -m gencache``: the same CLI as the ``gencache`` command.

The command line's signal handlers go in before the command's modules import (typer, rich: a few tenths of a
second), so a Ctrl-C or SIGTERM then is also one line and 130/143 (:mod:`gencache.cli.signals`).
"""

from gencache.cli import signals
from gencache.core.errors import Stopped

if __name__ == "__main__":
    signals.install()
    try:
        from gencache.cli.entry import main
    except Stopped as stop:
        signals.exit_now(stop)
    main()

__all__: list[str] = []
