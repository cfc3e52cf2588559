"""Import hygiene that users rely on: `gencache --help` stays fast (no torch, transformers or datasets), and the
reader never imports transformers or the config models (training workers read caches without them). What each
model-free command imports is pinned in test_command_imports.py."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from support.storage_helpers import make_entries, write_artifact

HEAVY = ("torch", "transformers", "datasets", "pydantic")


def loaded_after(code: str) -> list[str]:
    probe = f"{code}\nimport sys, json\nprint(json.dumps(sorted(m for m in {HEAVY!r} if m in sys.modules)))"
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    return list(json.loads(result.stdout.strip().splitlines()[-1]))


def test_help_and_config_loading_import_no_heavy_module(tmp_path: Path) -> None:
    assert loaded_after("from gencache.cli.app import run\nassert run(['--help']) == 0") == []
    loaded = loaded_after("import gencache\ngencache.load_config\ngencache.semantic_key\ngencache.GencacheError")
    assert loaded == ["pydantic"]  # the config models


def test_reading_never_imports_transformers(tmp_path: Path) -> None:
    artifact = write_artifact(tmp_path / "a", make_entries(3))
    code = f"""
import pickle
from gencache import CacheReader, open_caches
reader = CacheReader({str(artifact)!r})
key = next(iter(reader.keys()))
assert reader[key].sequences[0].numel() > 0
again = pickle.loads(pickle.dumps(reader))
assert again[key].texts == reader[key].texts
assert len(open_caches([{str(artifact)!r}])) == 3
p = reader.provenance
reader.check_compatible(model_path=p["model_path"], tokenizer_path=p["tokenizer_path"], dtype=p["dtype"],
                        tokenizer=p["tokenizer"])
"""
    assert loaded_after(code) == ["torch"]  # no transformers, and no pydantic: the format needs no config model
