"""A loaded teacher session: the teacher's weights loaded once, then one target published at a time.

This is the one code path behind every artifact a run publishes: ``generate`` in one process (one target, or the N
shards of ``--shards N`` in turn) and each worker of a Ray run (:mod:`gencache.run.ray`, shard after shard). Given
the run's plan and its checked inputs (:func:`gencache.run.preflight.preflight`), :meth:`TeacherSession.publish`
generates a target's keys, writes them with :class:`gencache.artifact.writer.ArtifactBuild`, records
``resolved_config.json`` and the summary, and publishes the directory with the no-replace rename. Nothing is printed
here.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gencache.core.tokenizer import tokenizer_state
from gencache.run.record import RunPlan, resolved_config

if TYPE_CHECKING:
    from gencache.core.progress import Progress
    from gencache.run.preflight import Plan, RunInputs, Target


@dataclass(frozen=True)
class Published:
    """One target published: its directory, entries, generated tokens, seconds and the rename used."""

    output_dir: Path
    entries: int
    tokens: int
    seconds: float
    rename_mode: str


class TeacherSession:
    """The run's ``plan`` and checked ``inputs`` with the teacher loaded once (:meth:`load`), publishing one
    target per :meth:`publish` call. ``launch`` (a Ray run's workers, shards and retries) is recorded in each
    ``resolved_config.json`` when given."""

    def __init__(self, plan: Plan, inputs: RunInputs, *, launch: Mapping[str, Any] | None = None) -> None:
        self.plan, self.inputs, self.launch = plan, inputs, launch
        self.loaded = False

    def load(self) -> None:
        """Load the teacher's weights (once; later calls do nothing)."""
        if self.loaded:
            return
        self.inputs.engine.load_weights()
        self.loaded = True

    def publish(
        self, target: Target, progress: Progress, *, on_published: Callable[[Path], None] | None = None
    ) -> Published:
        """Generate ``target``'s keys, write and publish its artifact; ``progress`` gets the engine's ``start``
        and ``advance`` calls. ``on_published(path)`` is called once the rename happened, also when an exception
        (a stop) interrupts the publish after it: the caller then knows the artifact is complete."""
        from gencache.artifact.writer import ArtifactBuild

        self.load()
        inputs = self.inputs
        prompts = [(key, inputs.samples.by_key(key).input_ids or ()) for key in target.keys]  # tokenized: never None
        started = time.monotonic()
        tokens = 0
        with ArtifactBuild(
            target.output_dir,
            provenance=self._provenance(),
            header_capacity=inputs.capacity[target.output_dir],
            rename_mode=inputs.rename_mode,
        ) as build:
            # closing(): an engine's worker threads stop when generation ends early (an error, a signal).
            with contextlib.closing(inputs.engine.generate(prompts, progress=progress)) as entries:
                for entry in entries:
                    build.writer.add(
                        entry.key,
                        [seq.numpy().tobytes() for seq in entry.sequences],
                        entry.texts,
                        entry.finish_reasons,
                    )
                    tokens += entry.num_tokens
            build.writer.finalize(resolved_config=self._resolved(target), summary=self._summary(target))
            try:
                mode = build.publish()
            finally:  # also when a stop lands after the rename, before this build's exit releases its lock
                if build.published and on_published is not None:
                    on_published(target.output_dir)
        return Published(target.output_dir, len(prompts), tokens, time.monotonic() - started, mode)

    def _provenance(self) -> dict[str, Any]:
        from gencache.artifact.manifest import make_provenance

        model = self.plan.config.model
        return make_provenance(
            model_path=model.model_path,
            tokenizer_path=model.effective_tokenizer_path,
            dtype=model.dtype,
            tokenizer=tokenizer_state(self.inputs.tokenizer),
        )

    def _resolved(self, target: Target) -> dict[str, Any]:
        inputs, plan = self.inputs, self.plan
        recorded = RunPlan(
            plan.config, plan.config_json, target.shard, target.output_dir, inputs.samples, target.keys, plan.digest
        )
        resolved = resolved_config(
            recorded,
            generation=inputs.generation,
            tokenizer=inputs.tokenizer,
            engine=inputs.engine,
            rename_mode=inputs.rename_mode,
            overrides=plan.overrides,
        )
        if self.launch is not None:
            resolved = _with_launch(resolved, self.launch)
        return resolved

    def _summary(self, target: Target) -> dict[str, Any]:
        samples = self.inputs.samples
        return {
            "duplicates": samples.duplicates,
            "data_configs": [{"index": s.index, "samples": s.samples, "unique": s.unique} for s in samples.summaries],
            "shard": None if target.shard is None else target.shard.shard_record(self.plan.digest),
        }


def _with_launch(resolved: dict[str, Any], launch: Mapping[str, Any]) -> dict[str, Any]:
    """``resolved`` with how the run was launched recorded (its digest computed again over it)."""
    from gencache.artifact.resolved import with_resolved_digest

    return with_resolved_digest(resolved | {"launch": dict(launch)})
