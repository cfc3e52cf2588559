"""A run: generating an artifact (``api``, ``plan``, ``preflight``, ``session``, on Ray ``ray`` and ``ray_cluster``)
and the work over a published one (``audit``, ``score`` with its HTML report, ``export``); it prints nothing.
"""
