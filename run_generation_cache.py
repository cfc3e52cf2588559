"""The seed's command line, kept as a thin alias: ``python run_generation_cache.py CONFIG.json [options]``.

Equivalent to ``gencache generate CONFIG.json [options]``, signals included: from the first line on, SIGINT and
SIGTERM end it with one line and 130 / 143 (gencache.core.interrupts), while it imports too.
"""

import sys

if __name__ == "__main__":
    from gencache.core import interrupts

    interrupts.install()
    try:
        from gencache.cli.app import run

        code = run(["generate", *sys.argv[1:]])
        interrupts.quiet_exit(code)
    except interrupts.Stopped as stop:
        interrupts.exit_now(stop)
    sys.exit(code)
