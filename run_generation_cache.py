"""The seed's command line, kept as a thin alias: ``python run_generation_cache.py CONFIG.json [options]``.

Equivalent to ``gencache generate CONFIG.json [options]``, signals included: from the first line on, SIGINT and
SIGTERM end it with one line and 130 / 143 (gencache.cli.signals), while it imports too.
"""

import sys

if __name__ == "__main__":
    from gencache.cli import signals
    from gencache.core.errors import Stopped

    signals.install()
    try:
        from gencache.cli.app import run

        code = run(["generate", *sys.argv[1:]])
        signals.quiet_exit(code)
    except Stopped as stop:
        signals.exit_now(stop)
    sys.exit(code)
