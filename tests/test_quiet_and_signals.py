"""Quiet where promised, and a signal at any moment is one line with the documented exit code.

The Python API prints nothing without a callback; the command line shows only gencache's lines unless
``--verbose``; SIGINT (130) and SIGTERM (143) while the command's modules import, while it checks, loads or
generates, just after the continuous engine publishes, or after the run has returned, end the process with one
line saying what was published, never a traceback.
"""

from __future__ import annotations

import json
import logging
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gencache.artifact.reader import verify
from gencache.core.errors import Stopped
from support.config_factory import config_dict, musique
from support.config_factory import write_config as factory_config
from test_generate_signals import Child

TIMEOUT = 180
STOP_LINES = ("Terminated by SIGINT", "Terminated by SIGTERM")


def write_config(tmp_path: Path, teacher: Path, engine: str = "transformers") -> Path:
    """Four MuSiQue samples, 8 new tokens, on ``engine``."""
    model = config_dict(tmp_path, teacher)["model"] | {"generation_kwargs": {"max_new_tokens": 8}}
    change = {"engine": engine} if engine != "transformers" else {}
    return factory_config(tmp_path, teacher, name="config.json", model=model, data_configs=[musique()], **change)


def wait_for_handlers(proc: subprocess.Popen[str]) -> None:
    """Until ``proc`` catches SIGTERM (the first moment of gencache's ``main``): on a loaded machine the interpreter
    alone can take longer to start than any fixed delay."""
    deadline = time.monotonic() + TIMEOUT
    while time.monotonic() < deadline and proc.poll() is None:
        status = Path(f"/proc/{proc.pid}/status").read_text()
        caught = re.search(r"^SigCgt:\s*([0-9a-f]+)", status, re.MULTILINE)
        if caught and int(caught.group(1), 16) >> (signal.SIGTERM - 1) & 1:
            return
        time.sleep(0.001)
    raise AssertionError("the command never installed its signal handlers")


def stopped_run(
    config: Path, args: list[str], delay: float, signum: int, *, after_main: bool = True
) -> tuple[int, list[str]]:
    """``python -m gencache generate CONFIG ARGS`` sent ``signum`` ``delay`` seconds after its ``main`` starts (or,
    without ``after_main``, after the process was spawned)."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "gencache", "generate", str(config), *args],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    if after_main:
        wait_for_handlers(proc)
    time.sleep(delay)
    proc.send_signal(signum)
    _, err = proc.communicate(timeout=TIMEOUT)
    return proc.returncode, err.splitlines()


def assert_one_stop_line(code: int, lines: list[str], signum: int) -> None:
    assert code == (130 if signum == signal.SIGINT else 143), lines
    assert not any("Traceback" in line for line in lines), lines
    stops = [line for line in lines if line.startswith(STOP_LINES)]
    assert len(stops) == 1 and lines[-1] == stops[0], lines


MODES = {
    "static": ("transformers", []),
    "continuous": ("transformers-continuous", []),
    "--shards": ("transformers", ["--shards", "2"]),
}


@pytest.mark.parametrize(
    ("mode", "signum"),
    [("static", signal.SIGTERM), ("continuous", signal.SIGINT), ("--shards", signal.SIGINT)],  # each mode, each signal
    ids=["static-SIGTERM", "continuous-SIGINT", "--shards-SIGINT"],
)
def test_a_signal_while_the_command_imports_is_one_line(
    mode: str, signum: int, tmp_path: Path, tiny_teacher_dir: Path
) -> None:
    engine, args = MODES[mode]
    config = write_config(tmp_path, tiny_teacher_dir, engine)
    code, lines = stopped_run(config, args, 0.05, signum)
    assert_one_stop_line(code, lines, signum)
    assert sorted(os.listdir(tmp_path)) == ["config.json"]


#: The child: ``gencache`` and ``gencache.cli`` imported (all that runs before ``main``), a mark, then ``main``.
EARLY_CHILD = "import gencache.cli; gencache.cli.main(['--help'])"


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_signal_in_the_first_milliseconds_of_main_is_one_line(signum: int) -> None:
    """From the first line of ``main``: before even gencache's signal module has imported, the one line of a stop
    before anything ran (``str(Stopped(name))``) and 130/143."""
    name = signal.Signals(signum).name
    for delay in (0.002, 0.01, 0.02, 0.04):
        proc = subprocess.Popen(
            [sys.executable, "-c", EARLY_CHILD], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        wait_for_handlers(proc)  # main has started
        time.sleep(delay)
        proc.send_signal(signum)
        out, err = proc.communicate(timeout=TIMEOUT)
        assert out == "", (delay, out)  # stopped before --help printed
        assert err.splitlines() == [str(Stopped(name))], (delay, err)
        assert proc.returncode == Stopped(name).exit_code, (delay, err)


WRAPPING_CHILD = """
import os, signal, sys, time
from gencache.cli import app

@app.app.command("wrapping")
def wrapping() -> None:  # code in the command's way that turns any interrupt into its own error, as pydantic-core's
    try:  # schema building does when a signal's handler runs inside it
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(60)
    except BaseException:
        raise RuntimeError("Error building validator") from None

app.main(["wrapping"])
"""


def test_a_signal_that_third_party_code_wraps_is_still_one_stop_line() -> None:
    proc = subprocess.run([sys.executable, "-c", WRAPPING_CHILD], capture_output=True, text=True, timeout=TIMEOUT)
    assert proc.stderr.splitlines() == [str(Stopped("SIGTERM"))]
    assert proc.returncode == 143


IMPORTING_CHILD = """
import os, signal, sys, time
from gencache.cli import app

@app.app.command("importing")
def importing() -> None:
    sys.path.insert(0, sys.argv[1])
    import slow_module  # signals itself halfway through, as a C++ extension's import (torch's) can be interrupted

app.main(["importing"])
"""

SLOW_MODULE = """
import os, signal, time
os.kill(os.getpid(), signal.SIGTERM)
time.sleep(0.3)
FINISHED = True
with open(os.path.join(os.path.dirname(__file__), "finished"), "w"):
    pass
"""


def test_a_signal_during_an_import_stops_the_command_once_the_import_returns(tmp_path: Path) -> None:
    # raised inside an extension's callback, the stop would abort the process (pybind11 terminates on it)
    (tmp_path / "slow_module.py").write_text(SLOW_MODULE)
    proc = subprocess.run(
        [sys.executable, "-c", IMPORTING_CHILD, str(tmp_path)], capture_output=True, text=True, timeout=TIMEOUT
    )
    assert proc.stderr.splitlines() == [str(Stopped("SIGTERM"))]
    assert proc.returncode == 143
    assert (tmp_path / "finished").exists()


@pytest.mark.slow
@pytest.mark.parametrize("delay", [1.2, 2.5])  # between the named moments the other signal tests stop at
def test_a_signal_at_any_moment_is_one_line(delay: float, tmp_path: Path, tiny_teacher_dir: Path) -> None:
    config = write_config(tmp_path, tiny_teacher_dir)
    for signum in (signal.SIGINT, signal.SIGTERM):
        code, lines = stopped_run(config, [], delay, signum, after_main=False)
        out = tmp_path / "out"
        if code == 0:  # the run was quicker than the signal: published
            assert "published" in lines[-1] and verify(out) == []
            break
        assert_one_stop_line(code, lines, signum)
        assert not [p for p in os.listdir(tmp_path) if p.startswith(".out.gencache-") and not p.endswith(".lock")]
        if out.exists():  # the stop came after the publish: a whole artifact, and the line says so
            assert verify(out) == [] and f"after {out} was published" in lines[-1], lines
            break
        assert "nothing was published" in lines[-1], lines


@pytest.mark.slow
@pytest.mark.parametrize(
    ("phase", "signum"),
    [("published", signal.SIGINT), ("run_finished", signal.SIGTERM)],  # each moment, each signal
    ids=["published-SIGINT", "run_finished-SIGTERM"],
)
def test_a_signal_after_the_publish_says_the_artifact_was_published(
    phase: str, signum: int, tmp_path: Path, tiny_teacher_dir: Path
) -> None:
    child = Child(write_config(tmp_path, tiny_teacher_dir, "transformers-continuous"))
    child.run_until(phase)
    child.proc.send_signal(signum)
    child.release()
    code = child.finish()
    lines = child.stderr.splitlines()
    assert_one_stop_line(code, lines, signum)
    assert f"after {tmp_path / 'out'} was published" in lines[-1] and "nothing was published" not in child.stderr
    assert verify(tmp_path / "out") == []


# -- quiet where promised ---------------------------------------------------------------------------------------
@pytest.mark.slow
def test_the_python_api_prints_nothing_and_leaves_the_libraries_as_it_found_them(
    tmp_path: Path, tiny_teacher_dir: Path
) -> None:
    config = write_config(tmp_path, tiny_teacher_dir)
    code = (
        "import sys, gencache\n"
        "import transformers.utils.logging as tl\n"
        "before = (tl.get_verbosity(), tl.is_progress_bar_enabled())\n"
        f"path = gencache.generate({str(config)!r})\n"
        "print(path)\n"
        "print(before == (tl.get_verbosity(), tl.is_progress_bar_enabled()))\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=TIMEOUT, check=True)
    assert result.stderr == ""
    assert result.stdout.splitlines() == [str(tmp_path / "out"), "True"]


@pytest.mark.slow
def test_the_command_line_shows_third_party_output_only_with_verbose(tmp_path: Path, tiny_teacher_dir: Path) -> None:
    config = write_config(tmp_path, tiny_teacher_dir)
    chatty = {**os.environ, "TRANSFORMERS_VERBOSITY": "info"}  # transformers logs each file it loads
    quiet = subprocess.run(
        [sys.executable, "-m", "gencache", "generate", str(config)],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        env=chatty,
    )
    assert quiet.returncode == 0, quiet.stderr
    assert "Loading weights" not in quiet.stderr and "it/s" not in quiet.stderr
    assert "[transformers]" not in quiet.stderr
    messages = [line for line in quiet.stderr.splitlines() if not line.startswith("gencache: generate:")]
    assert [line.split(" ")[0] for line in messages] == ["4", "teacher", "published"], quiet.stderr
    verbose = subprocess.run(
        [sys.executable, "-m", "gencache", "generate", str(config), "--output-dir", str(tmp_path / "v"), "--verbose"],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        env=chatty,
    )
    assert verbose.returncode == 0 and "[transformers] loading configuration file" in verbose.stderr
    assert json.loads((tmp_path / "out" / "manifest.json").read_text())  # both published


def test_every_tqdm_bar_and_library_warning_is_off_inside_a_quiet_block_and_back_after_it() -> None:
    import io

    import tqdm.std

    from gencache.cli.render import quiet_libraries

    original = tqdm.std.tqdm.__dict__["__init__"]
    logger = logging.getLogger("transformers.quiet_test")
    for _ in range(2):  # a second block in the same process too
        with quiet_libraries():
            muted = tqdm.std.tqdm(range(3), disable=False, file=io.StringIO())  # as vLLM asks for its bar
            assert muted.disable
            muted.close()
            assert not logger.isEnabledFor(logging.WARNING) and logger.isEnabledFor(logging.ERROR)
        assert tqdm.std.tqdm.__dict__["__init__"] is original
        assert logging.root.manager.disable == logging.NOTSET
        shown = tqdm.std.tqdm(range(3), file=io.StringIO())
        assert not shown.disable
        shown.close()


@pytest.mark.slow
def test_a_run_speaks_before_its_slow_imports_and_times_the_teacher_s_load_without_them(
    tmp_path: Path, tiny_teacher_dir: Path
) -> None:
    """The first message comes before torch or transformers is imported, and the teacher's modeling code is
    imported before "loading the teacher" (the timer starts after that message), so "teacher loaded in" is the
    load alone."""
    config = write_config(tmp_path, tiny_teacher_dir)
    code = (
        "import json, sys, gencache\n"
        "seen = []\n"
        "def notify(level, text):\n"
        "    heavy = [name for name in ('torch', 'transformers', 'transformers.models.qwen3.modeling_qwen3')\n"
        "             if name in sys.modules]\n"
        "    seen.append([text.split(' ')[0], heavy])\n"
        f"gencache.generate({str(config)!r}, notify=notify)\n"
        "print(json.dumps(seen))\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=TIMEOUT, check=True)
    seen = dict(json.loads(result.stdout))
    assert seen["checking"] == []
    assert seen["loading"] == ["torch", "transformers", "transformers.models.qwen3.modeling_qwen3"]


def test_a_status_shows_on_a_terminal_only() -> None:
    import io

    from rich.console import Console

    from gencache.cli.render import render_notice

    for terminal in (True, False):
        stream = io.StringIO()
        console = Console(file=stream, force_terminal=terminal, no_color=True, width=200)
        render_notice(console, "status", "loading the teacher t")
        render_notice(console, "info", "teacher loaded in 5 ms")
        shown = [re.sub(r"\x1b\[[0-9;]*m", "", line) for line in stream.getvalue().splitlines()]  # no styles
        assert shown == (
            ["loading the teacher t ...", "teacher loaded in 5 ms"] if terminal else ["teacher loaded in 5 ms"]
        )
