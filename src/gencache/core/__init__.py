"""The foundation every other package stands on: the one exception hierarchy (``errors``), canonical JSON
(``canonical``), the tokenizer state an artifact records (``tokenizer``), the progress protocol (``progress``), the
version (``version``), lazy public names (``lazy``) and process state that third-party code changes, put back when
it returns (``process``). Nothing here imports another gencache package.
"""
