"""A run: ``api`` (:func:`gencache.generate`, :func:`gencache.dry_run`), ``plan`` (the targets and shards, decided
once), ``preflight`` (the config with its overrides and every check before the weights load, in order), ``session``
(the teacher loaded once, publishing each target), the Ray pool (``ray``) and connecting to a cluster
(``ray_cluster``), and the work over a published run: ``audit``, ``score`` with the HTML report, and ``export``.
Library code: it prints nothing.
"""
