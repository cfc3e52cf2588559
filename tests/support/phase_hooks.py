"""Stop points for the crash and signal tests, injected into a child process by wrapping gencache's functions.

The product has no test hooks: a child that the tests start calls :func:`install` (from ``$GENCACHE_TEST_PHASES``,
``"W"`` or ``"W:R"``, file descriptors inherited from the test), which wraps the functions below so that each moment
writes its name and a newline to ``W`` and, with ``R``, then blocks reading one byte from ``R``: the test kills or
signals the child exactly there. The moments: ``temp_created`` (the temporary directory exists, the payload not
yet), ``appended`` (after each entry), ``header_written``, ``manifest_written``, ``resolved_written``, ``renamed``
(the rename done, the parent not yet fsynced), ``published``, and for ``gencache generate`` ``model_loaded`` and
``run_finished`` (every target published, the command not yet returned).

``python phase_hooks.py ARGS...`` runs the ``gencache`` command line with the hooks installed.
"""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

ENV = "GENCACHE_TEST_PHASES"


def install(*, run: bool = False) -> None:
    """Wrap gencache's functions (with ``run``, those of ``gencache generate`` too) to report their moments; nothing
    when ``$GENCACHE_TEST_PHASES`` is unset."""
    value = os.environ.get(ENV)
    if not value:
        return
    write_fd, _, read = value.partition(":")

    def report(name: str) -> None:
        os.write(int(write_fd), f"{name}\n".encode())
        if read:
            os.read(int(read), 1)

    from gencache.artifact import publish, writer

    def after(owner: Any, name: str, phase: str | Callable[..., str | None]) -> None:
        original = getattr(owner, name)

        @functools.wraps(original)
        def wrapped(*args: Any, **kwargs: Any) -> Any:
            result = original(*args, **kwargs)
            said = phase if isinstance(phase, str) else phase(*args)
            if said:
                report(said)
            return result

        setattr(owner, name, wrapped)

    def before(owner: Any, name: str, phase: Callable[..., str | None]) -> None:
        original = getattr(owner, name)

        @functools.wraps(original)
        def wrapped(*args: Any, **kwargs: Any) -> Any:
            said = phase(*args)
            if said:
                report(said)
            return original(*args, **kwargs)

        setattr(owner, name, wrapped)

    before(writer.CacheWriter, "__init__", lambda *args: "temp_created")
    after(writer.CacheWriter, "add", "appended")
    written = {"manifest.json": "manifest_written", "resolved_config.json": "resolved_written"}
    first = "manifest.json"  # the header is written and synced before the manifest
    before(writer.CacheWriter, "_write_new", lambda _, path, *__: "header_written" if path.name == first else None)
    after(writer.CacheWriter, "_write_new", lambda _, path, *__: written[path.name])
    # publish fsyncs the temporary directory before its rename and the parent after it
    before(publish, "fsync_dir", lambda path: None if publish.TEMP_RE.match(Path(path).name) else "renamed")
    after(writer, "publish", "published")
    if run:
        from gencache.generation.engines import Engine
        from gencache.run import session

        after(Engine, "load_weights", "model_loaded")  # the transformers engines' load (vLLM's is its own)
        last = "run_finished"  # after the last target's publish, inside the run
        after(
            session.TeacherSession,
            "publish",
            lambda run, target, *_: last if target is run.targets[-1] else None,
        )


if __name__ == "__main__":
    install(run=True)
    from gencache.cli import main

    sys.argv[0] = "gencache"
    main()
