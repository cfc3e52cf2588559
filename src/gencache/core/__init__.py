"""The foundation every other package stands on: the one exception hierarchy (``errors``), canonical JSON
(``canonical``), the tokenizer state an artifact records (``tokenizer``), hub access scoped to a call (``hub``),
the progress protocol (``progress``), the version (``version``), lazy public names (``lazy``) and the command
line's quieting of other libraries (``quiet``). Nothing here imports another gencache package.
"""

__all__: list[str] = []
