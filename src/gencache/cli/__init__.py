"""The command line, a thin layer over :mod:`gencache.run` and :mod:`gencache.artifact`: ``entry`` (the console
script), ``app`` (the typer commands), ``read`` (``inspect`` and ``verify`` without typer), ``generate`` and
``audit`` (what those commands print), ``render`` (every table and report drawn on the console), ``inspect_view``
(``inspect``'s tables as plain text when the output is no terminal), ``demo`` and ``init``, ``signals`` (the only
signal handlers) and ``quiet`` (the only quieting of other libraries). The only code that prints, and the owner of
the process.
"""

__all__: list[str] = []
