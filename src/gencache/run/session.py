"""A teacher session: the engine built for the config's teacher (:func:`build_engine`), its weights loaded once,
then one target published at a time; behind every artifact of ``generate`` and of each worker of a Ray run.
"""

from __future__ import annotations

import contextlib
import copy
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from gencache.artifact.manifest import make_provenance, shard_data_configs
from gencache.artifact.names import FORMAT_VERSION, make_shard_info
from gencache.artifact.resolved import local_identity, with_resolved_digest
from gencache.artifact.store import Location
from gencache.artifact.writer import ArtifactBuild
from gencache.config.engines import GEN_BATCH_SIZE_USE
from gencache.config.models import CacheConfig
from gencache.config.names import ENGINE_VLLM
from gencache.core.progress import Progress
from gencache.core.tokenizer import tokenizer_state
from gencache.core.version import __version__
from gencache.data.prompts import chat_template_digest
from gencache.data.samples import SampleSet
from gencache.generation.effective import EffectiveGeneration
from gencache.generation.engines import Engine, EngineContext, create_engine
from gencache.run.plan import Plan, Target


@dataclass(frozen=True)
class Published:
    entries: int
    tokens: int
    seconds: float
    rename_mode: str


@dataclass
class TeacherSession:
    """The run's ``plan`` and what its checks produced (every part present: the targets still to publish, with their
    keys), publishing a target per :meth:`publish` once its engine's weights are loaded. A Ray worker's
    ``resolved_config.json`` records its ``launch`` (workers, shards, retries) and the driver's
    ``working_directory``, where the config's relative paths were read, in place of this process's."""

    plan: Plan
    targets: list[Target]
    device: str
    tokenizer: Any
    generation: EffectiveGeneration
    engine: Engine
    samples: SampleSet
    capacity: Mapping[Location, int]
    rename_mode: str
    launch: Mapping[str, Any] | None = None
    working_directory: str | None = None

    def publish(
        self, target: Target, progress: Progress, *, on_published: Callable[[Location], None] | None = None
    ) -> Published:
        """Generate ``target``'s keys (the teacher loaded), write and publish its artifact. ``on_published(path)`` is
        called once the rename happened, also when an exception (a stop) interrupts the publish after it: the caller
        then knows the artifact is complete."""
        model = self.plan.config.model
        prompts = [(key, self.samples.by_key(key).input_ids or ()) for key in target.keys]  # tokenized: never None
        started, tokens = time.monotonic(), 0
        tokenizer = tokenizer_state(self.tokenizer)
        provenance = make_provenance(model.model_path, model.effective_tokenizer_path, model.dtype, tokenizer)
        with ArtifactBuild(
            target.output_dir,
            provenance=provenance,
            header_capacity=self.capacity[target.output_dir],
        ) as build:
            # closing(): an engine's worker threads stop when generation ends early (an error, a signal).
            with contextlib.closing(self.engine.generate(prompts, progress=progress)) as entries:
                for entry in entries:
                    sequences = [seq.numpy().tobytes() for seq in entry.sequences]
                    build.writer.add(entry.key, sequences, entry.texts, entry.finish_reasons)
                    tokens += entry.num_tokens
            samples, digest = self.samples, self.plan.digest
            summary = {
                "duplicates": samples.duplicates,
                "data_configs": [
                    {"index": s.index, "samples": s.samples, "unique": s.unique} for s in samples.summaries
                ],
                "shard": None if (spec := target.shard) is None else make_shard_info(spec.index, spec.count, digest),
            }
            build.writer.finalize(resolved_config=self._resolved(target), summary=summary)
            try:
                mode = build.publish()
            finally:  # also when a stop lands after the rename, before this build's exit releases its lock
                if build.published and on_published is not None:
                    on_published(target.output_dir)
        return Published(len(prompts), tokens, time.monotonic() - started, mode)

    def _resolved(self, target: Target) -> dict[str, Any]:
        """``resolved_config.json``: everything needed to reproduce and audit the run (provenance only; training
        never reads it)."""
        plan, samples, model = self.plan, self.samples, self.plan.config.model
        # The recorded config must rebuild the same samples from any working directory (gencache export does):
        # local sources and local model/tokenizer directories are made absolute; hub ids stay as they are.
        config_json = copy.deepcopy(plan.config_json)
        config_json["output_dir"] = str(plan.base)
        for data_config, summary in zip(config_json["data_configs"], samples.summaries, strict=True):
            if summary.source.kind in ("directory", "file"):
                data_config["source"] = summary.source.location
        for field_name in ("model_path", "tokenizer_path"):
            value = config_json["model"].get(field_name)
            if isinstance(value, str) and os.path.exists(value):
                config_json["model"][field_name] = os.path.abspath(value)
        resolved = {
            "format_version": FORMAT_VERSION,
            "gencache_version": __version__,
            "config": config_json,
            "overrides": plan.overrides.to_json(),
            "output_dir": str(target.output_dir),
            "working_directory": self.working_directory or os.getcwd(),
            "run_digest": plan.digest,
            "shard": None
            if (spec := target.shard) is None
            else make_shard_info(spec.index, spec.count, plan.digest)
            | {
                "origin": spec.origin,
                "data_configs": shard_data_configs(
                    ((s.data_config_index, s.key) for s in samples), target.keys, len(samples.summaries)
                ),
            },
            "sources": [s.source.to_json() for s in samples.summaries],
            "data_kwargs": [dict(s.data_kwargs) for s in samples.summaries],
            "generation": self.generation.kwargs,
            "tokenizer": tokenizer_state(self.tokenizer),
            "chat_template_sha256": chat_template_digest(self.tokenizer),
            "tokenization": {
                "scheme": "per-part",
                "add_special_tokens": False,
                "padding_side": "left",
                "description": "each inline text and each document tokenized separately, ids concatenated",
            },
            "engine": self.engine.describe(),
            "batching": {
                **self.engine.batching(),
                "gen_batch_size": {"value": plan.config.gen_batch_size, "use": GEN_BATCH_SIZE_USE[plan.config.engine]},
            },
            "model": {
                "model_path": model.model_path,
                "revision": model.revision,
                "commit_hash": self.engine.commit_hash(),
                # a local teacher is recognised by what it is, wherever it is moved (check_compatible, audit)
                "identity": {
                    "model_path": local_identity(model.model_path),
                    "tokenizer_path": local_identity(model.effective_tokenizer_path),
                },
            },
            "runtime": self.engine.runtime(),
            "publish": {"rename": self.rename_mode},
            "samples": {
                "total": len(samples),
                "unique": len(samples.unique),
                "generated": len(target.keys),
                "duplicates": samples.duplicates,
                "conflicting_prompts": len(samples.conflicting_prompts),
            },
        }
        if self.launch is not None:
            resolved["launch"] = dict(self.launch)
        return with_resolved_digest(resolved)


def build_engine(
    config: CacheConfig,
    *,
    generation: EffectiveGeneration,
    tokenizer: Any,
    device: str,
    name: str | None = None,
    model_path: str | None = None,
    dtype: str | None = None,
    one_prompt: bool = False,
) -> Engine:
    """The engine ``name`` (default the config's) for ``config``'s teacher: the run's check and ``gencache audit``
    build theirs here, so both meet the same refusals before any weights load. ``one_prompt`` (the audit): batch size
    one, and the transformers engines with their default options."""
    model, chosen = config.model, name or config.engine
    own = chosen == config.engine and (chosen == ENGINE_VLLM or not one_prompt)
    return create_engine(
        chosen,
        EngineContext(
            generation=generation,
            tokenizer=tokenizer,
            model_path=model_path or model.model_path,
            dtype=dtype or model.dtype,
            device=device,
            revision=model.revision,
            attn_implementation=model.attn_implementation,
            batch_size=1 if one_prompt else config.gen_batch_size,
            seed=config.seed,
            options=config.engine_options if own else None,
        ),
    )
