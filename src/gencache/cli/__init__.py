"""The command line, a thin layer over :mod:`gencache.run` and :mod:`gencache.artifact`: ``app`` (the typer
commands, the console script's entry point and the one table from errors to exit codes), ``read`` (``inspect`` and
``verify``), ``generate`` and ``audit`` (what those commands print), ``render`` (the dry run, messages, verify's bar
and the audit drawn on the console), ``inspect_view`` (``inspect``'s tables), ``demo`` and ``init``. The only code
that prints.
"""
