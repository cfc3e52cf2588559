"""A run: generating an artifact (``api``, ``plan``, ``preflight``, ``session``, on Ray ``ray`` and ``ray_cluster``)
and the work over a published one (``audit``, ``score`` with the HTML report, ``export``). Library code: it prints nothing.
"""
