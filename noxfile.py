"""Developer sessions. Run with ``uv run nox -s <session>``; every session uses the project's uv environment."""

from __future__ import annotations

import nox

nox.options.default_venv_backend = "none"
nox.options.sessions = ["lint", "typecheck", "tests"]


@nox.session
def tests(session: nox.Session) -> None:
    """The whole test suite (the README's test command)."""
    session.run("uv", "run", "pytest", *session.posargs, external=True)


@nox.session
def lint(session: nox.Session) -> None:
    """ruff lint and format check."""
    session.run("uv", "run", "ruff", "check", "src", "tests", "benchmarks", "noxfile.py", external=True)
    session.run("uv", "run", "ruff", "format", "--check", "src", "tests", "benchmarks", "noxfile.py", external=True)


@nox.session
def typecheck(session: nox.Session) -> None:
    """mypy (strict) over the package."""
    session.run("uv", "run", "mypy", "src/gencache", external=True)


@nox.session
def docs(session: nox.Session) -> None:
    """Regenerate docs/config.md and docs/config.schema.json from the config models."""
    session.run("uv", "run", "python", "-m", "gencache.configdoc", external=True)


@nox.session
def bench(session: nox.Session) -> None:
    """Run the benchmarks and rewrite docs/benchmarks.md (pass --quick for small shapes)."""
    session.run("uv", "run", "python", "benchmarks/run_all.py", *session.posargs, external=True)
