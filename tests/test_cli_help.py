"""The command line reads as written: each command's description in ``gencache --help`` flows on one line (not
broken at the docstring's line breaks), and a ``--set`` given with a space instead of ``=`` is one line showing the
``PATH=VALUE`` form."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from gencache.cli.app import app
from gencache.cli.app import run as cli_run
from support.terminal_env import without_terminal


def test_the_command_list_flows_each_description() -> None:
    # Whatever the environment: no forced terminal (GITHUB_ACTIONS, FORCE_COLOR, PY_COLORS), no fixed width
    # (TERMINAL_WIDTH overrides COLUMNS in typer), no colours.
    env = without_terminal(COLUMNS="1000", TERM="dumb", NO_COLOR="1", _TYPER_FORCE_DISABLE_TERMINAL="1")
    done = subprocess.run(
        [sys.executable, "-m", "gencache", "--help"], capture_output=True, text=True, env=env, timeout=300, check=False
    )
    assert done.returncode == 0, done.stderr
    for command in app.registered_commands:
        assert command.callback is not None and command.callback.__doc__
        description = " ".join(command.callback.__doc__.split())
        assert any(description in line for line in done.stdout.splitlines()), description


def test_a_set_with_a_space_for_the_equals_sign_shows_the_path_value_form(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "config.json"
    assert cli_run(["generate", str(config), "--set", "gen_batch_size", "8"]) == 2
    err = capsys.readouterr().err
    assert err == "error: --set takes PATH=VALUE as one argument: --set gen_batch_size=8.\n"
    assert not list(tmp_path.iterdir())


def test_an_unknown_option_is_a_usage_error_exiting_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli_run(["inspect", "--nope"]) == 2
    err = capsys.readouterr().err
    assert "No such option: --nope" in err and "internal error" not in err
