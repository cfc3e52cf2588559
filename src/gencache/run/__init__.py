"""A run and what it records: ``api`` (:func:`gencache.generate` and :func:`gencache.dry_run`), ``plan`` (what a
run publishes, decided once), ``preflight`` (every check before the weights load, in order), ``session`` (the
teacher loaded once, publishing each target and its ``resolved_config.json``), ``overrides`` and
``sharding`` (``--set``/``--limit`` and ``--shard``), Ray (``ray_*``), and the work over a published run:
``audit`` (:func:`gencache.audit`), ``score``, ``export`` and the quality report. Library code: it returns values
and prints nothing.
"""
