"""A run and what it records: ``api`` (:func:`gencache.generate`, the one entry point of a run), ``pipeline`` (one run
end to end), ``targets`` and ``record`` (what a run publishes and the ``resolved_config.json`` it writes),
``checks`` with ``input_checks`` and ``teacher_checks`` (every check before the weights load, in two phases) and
``findings`` (what they find), ``overrides`` and ``sharding`` (``--set``/``--limit`` and ``--shard``), and the work
over a published run: ``recorded`` (the run an artifact records), ``audit`` (:func:`gencache.audit`) and
``export``. Library code: it returns values and prints nothing.
"""
