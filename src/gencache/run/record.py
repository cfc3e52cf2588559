"""What a run records about itself: the plan fixed before weights load and ``resolved_config.json`` (everything
needed to reproduce and audit the run; provenance only, never read by training)."""

from __future__ import annotations

import copy
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gencache.artifact.names import FORMAT_VERSION
from gencache.artifact.resolved import local_identity, with_resolved_digest
from gencache.artifact.summary import shard_data_configs
from gencache.config import CacheConfig
from gencache.config.engines import GEN_BATCH_SIZE_USE
from gencache.core.tokenizer import tokenizer_state
from gencache.core.version import __version__
from gencache.data.prompts import chat_template_digest
from gencache.run.overrides import Overrides
from gencache.run.sharding import ShardSpec

if TYPE_CHECKING:
    from gencache.data.samples import SampleSet
    from gencache.generation.effective import EffectiveGeneration
    from gencache.generation.engines import Engine


@dataclass(frozen=True)
class RunPlan:
    """What a run will do, fixed before any weights load."""

    config: CacheConfig
    config_json: dict[str, Any]
    shard: ShardSpec | None
    output_dir: Path
    samples: SampleSet
    keys: tuple[str, ...]
    run_digest: str


def absolute_path(path: str) -> Path:
    """``output_dir`` relative to the working directory, made absolute without resolving symlinks."""
    return Path(os.path.abspath(os.path.expanduser(path)))


def resolved_config(
    plan: RunPlan,
    *,
    generation: EffectiveGeneration,
    tokenizer: Any,
    engine: Engine,
    rename_mode: str,
    overrides: Overrides | None = None,
) -> dict[str, Any]:
    """Everything needed to reproduce and audit the run (provenance only; training never reads it)."""
    # The recorded config must rebuild the same samples from any working directory (gencache export does):
    # local sources and local model/tokenizer directories are made absolute; hub ids stay as they are.
    config_json = copy.deepcopy(plan.config_json)
    config_json["output_dir"] = str(absolute_path(plan.config.output_dir))
    for data_config, summary in zip(config_json["data_configs"], plan.samples.summaries, strict=True):
        if summary.source.kind in ("directory", "file"):
            data_config["source"] = summary.source.location
    for field_name in ("model_path", "tokenizer_path"):
        value = config_json["model"].get(field_name)
        if isinstance(value, str) and os.path.exists(value):
            config_json["model"][field_name] = os.path.abspath(value)
    return with_resolved_digest(
        {
            "format_version": FORMAT_VERSION,
            "gencache_version": __version__,
            "config": config_json,
            "overrides": (overrides or Overrides()).to_json(),
            "output_dir": str(plan.output_dir),
            "working_directory": os.getcwd(),
            "run_digest": plan.run_digest,
            "shard": None
            if plan.shard is None
            else plan.shard.shard_record(plan.run_digest)
            | {
                "origin": plan.shard.origin,
                "data_configs": shard_data_configs(
                    ((s.data_config_index, s.key) for s in plan.samples), plan.keys, len(plan.samples.summaries)
                ),
            },
            "sources": [s.source.to_json() for s in plan.samples.summaries],
            "data_kwargs": [dict(s.data_kwargs) for s in plan.samples.summaries],
            "generation": generation.kwargs,
            "tokenizer": tokenizer_state(tokenizer),
            "chat_template_sha256": chat_template_digest(tokenizer),
            "tokenization": {
                "scheme": "per-part",
                "add_special_tokens": False,
                "padding_side": "left",
                "description": "each inline text and each document tokenized separately, ids concatenated",
            },
            "engine": engine.describe(),
            "batching": {
                **engine.batching(),
                "gen_batch_size": {
                    "value": plan.config.gen_batch_size,
                    "use": GEN_BATCH_SIZE_USE[plan.config.engine],
                },
            },
            "model": {
                "model_path": plan.config.model.model_path,
                "revision": plan.config.model.revision,
                "commit_hash": engine.commit_hash(),
                # a local teacher is recognised by what it is, wherever it is moved (check_compatible, audit)
                "identity": {
                    "model_path": local_identity(plan.config.model.model_path),
                    "tokenizer_path": local_identity(plan.config.model.effective_tokenizer_path),
                },
            },
            "runtime": engine.runtime(),
            "publish": {"rename": rename_mode},
            "samples": {
                "total": len(plan.samples),
                "unique": len(plan.samples.unique),
                "generated": len(plan.keys),
                "duplicates": plan.samples.duplicates,
                "conflicting_prompts": len(plan.samples.conflicting_prompts),
            },
        }
    )
