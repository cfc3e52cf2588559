"""A run and what it records: ``api`` (:func:`gencache.generate` and :func:`gencache.dry_run`), ``plan`` (the
config with its ``--set``/``--output-dir``/``--limit`` overrides, the shards and what the run publishes, decided
once), ``preflight`` (every check before the weights load, in order), ``session`` (the teacher's engine, loaded once,
publishing each target and its ``resolved_config.json``), the Ray pool and its cluster (``ray``), and the work over a
published run: ``audit`` (:func:`gencache.audit`), ``score`` with the HTML report, and ``export``. Library
code: it returns values and prints nothing.
"""
