"""The ``transformers`` engine (the default, and the only one that honours every setting gencache accepts): static
batches through ``model.generate``, sorted by length (longest first), left padded with an explicit attention mask.

gencache's stopping criterion (:class:`~gencache.generation.finish.FinishRecorder`) records the step at which every
row finished and why, and the answer is cut there, never by token value, so fill tokens never enter an answer.
When sampling, :class:`~gencache.generation.sampling.SequenceSampler`, placed after every processor and warper
transformers builds, picks each row's token from the row's own stream, so an answer does not depend on
``gen_batch_size`` or the other prompts.
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Generator, Iterator, Sequence
from typing import TYPE_CHECKING, Any

from gencache.config.engines import StaticOptions
from gencache.config.names import ENGINE_STATIC
from gencache.core.errors import GenerationError, first_line
from gencache.generation import teacher
from gencache.generation.engines import Engine, GeneratedEntry, KeyedPrompt, Prompts, entry_of
from gencache.generation.finish import FINISH_LENGTH, FinishRecorder, FinishScanner
from gencache.generation.sampling import SequenceSampler, sampling_seed

if TYPE_CHECKING:
    from gencache.generation.effective import EffectiveGeneration


def plan_batches(lengths: Sequence[int], batch_size: int) -> list[list[int]]:
    """Indices of the prompts sorted by length, longest first (ties keep their input order), in chunks of
    ``batch_size``."""
    order = sorted(range(len(lengths)), key=lambda index: -lengths[index])
    return [order[start : start + batch_size] for start in range(0, len(order), batch_size)]


def batching_policy(batch_size: int) -> dict[str, Any]:
    """The batching facts recorded in ``resolved_config.json`` (batched half-precision greedy output can depend
    on batch composition, so they are part of the provenance)."""
    return {
        "order": "length-sorted-longest-first",
        "sort": "stable, by prompt token count, descending",
        "batch_size": batch_size,
        "unit": "unique samples",
        "padding_side": "left",
        "attention_mask": "explicit",
        "answer_cut": "recorded finish step per row (eos inclusive, stop_string inclusive, length)",
    }


@contextlib.contextmanager
def _last_processor(model: Any, sampler: SequenceSampler | None) -> Iterator[None]:
    """While generating, ``sampler`` is appended to the logits processors transformers builds (after its warpers,
    which a ``logits_processor`` argument would precede); the model's own method is restored afterwards."""
    if sampler is None:
        yield
        return
    build = model._get_logits_processor

    def with_sampler(*args: Any, **kwargs: Any) -> Any:
        processors = build(*args, **kwargs)
        processors.append(sampler)
        return processors

    model._get_logits_processor = with_sampler
    try:
        yield
    finally:
        del model._get_logits_processor


def generate_entries(
    model: Any,
    tokenizer: Any,
    generation: EffectiveGeneration,
    prompts: Sequence[KeyedPrompt],
    *,
    batch_size: int,
    seed: int = 0,
) -> Generator[GeneratedEntry, None, None]:
    """Generate every prompt (``(key, input_ids)`` of unique samples) and yield one :class:`GeneratedEntry` per
    prompt, in batch order. The explicit attention mask lets prompts contain the pad id. Out of memory is a
    :class:`GenerationError` naming the batch.

    Each ``model.generate`` call gets the effective config as the model's generation config too, so transformers
    cannot re-fill dropped settings (the teacher's sampling parameters under greedy decoding) from the teacher;
    gencache's recorder decides stop strings (outside beam search). When sampling, transformers still makes its own
    draw from torch's global generator (the sampler's one-hot scores make it return the sampler's token): the
    generator is restored after each call, so sampling leaves it as it found it."""
    import torch

    device = model.device
    per_prompt = generation.num_return_sequences
    pad_id = generation.config.pad_token_id
    pad_id = int(pad_id if pad_id is not None else tokenizer.pad_token_id or 0)
    beams = generation.num_beams > 1
    config = copy.deepcopy(generation.config)
    if not beams:
        config.stop_strings = None
    scanner = FinishScanner.of(generation, tokenizer)
    cuda = [device] if device.type == "cuda" else []
    for batch_index, batch in enumerate(plan_batches([len(ids) for _, ids in prompts], batch_size)):
        width = max(len(prompts[index][1]) for index in batch)
        described = (
            f"batch {batch_index} ({len(batch)} prompts x {per_prompt} sequences, prompt width {width} tokens, "
            f"max_new_tokens {generation.max_new_tokens})"
        )
        input_ids = torch.full((len(batch), width), pad_id, dtype=torch.long)
        attention_mask = torch.zeros((len(batch), width), dtype=torch.long)
        for row, index in enumerate(batch):
            ids = prompts[index][1]
            input_ids[row, width - len(ids) :] = torch.tensor(list(ids), dtype=torch.long)
            attention_mask[row, width - len(ids) :] = 1
        # beam outputs are cut at their first EOS; sampling beam search is refused before the weights load
        recorder = None if beams else FinishRecorder(scanner, prompt_width=width, rows=len(batch) * per_prompt)
        sampler = None
        if generation.do_sample and not beams:
            streams = [sampling_seed(seed, prompts[index][0], s) for index in batch for s in range(per_prompt)]
            sampler = SequenceSampler(streams, width)
        previous, model.generation_config = model.generation_config, config
        try:
            with torch.inference_mode(), _last_processor(model, sampler), torch.random.fork_rng(devices=cuda):
                sequences = model.generate(  # a tensor: return_dict_in_generate is refused
                    input_ids=input_ids.to(device),
                    attention_mask=attention_mask.to(device),
                    generation_config=config,
                    stopping_criteria=teacher.hf().StoppingCriteriaList([recorder]) if recorder else None,
                )
        except torch.OutOfMemoryError as exc:
            del input_ids, attention_mask
            if torch.cuda.is_available():
                torch.cuda.empty_cache()
            raise GenerationError(
                f"Out of memory generating {described} on {device}; try a smaller gen_batch_size (now {batch_size})."
            ) from exc
        except Exception as exc:
            raise GenerationError(f"Generation failed in {described}: {first_line(exc)}") from exc
        finally:
            model.generation_config = previous
        generated = sequences[:, width:]
        del sequences, input_ids, attention_mask
        steps = generated.shape[1]
        if recorder is not None:
            found = recorder.results(steps)
        else:  # beam search: a hypothesis is final at its first EOS token
            eos = FinishScanner(
                eos_token_ids=generation.eos_token_ids, stop_strings=(), tokenizer=None, max_new_tokens=steps
            )
            found = [eos.scan(row) or (steps, FINISH_LENGTH) for row in generated.tolist()]
        for position, index in enumerate(batch):
            rows = range(position * per_prompt, (position + 1) * per_prompt)
            yield entry_of(
                prompts[index][0], [(generated[r, : found[r][0]].tolist(), found[r][1]) for r in rows], tokenizer
            )
        del generated


class TransformersEngine(Engine):
    """The ``transformers`` engine (see the module docstring)."""

    name = ENGINE_STATIC
    options_model = StaticOptions

    def entries(self, prompts: Prompts) -> Generator[GeneratedEntry, None, None]:
        ctx = self.context
        return generate_entries(
            self.model, ctx.tokenizer, ctx.generation, prompts, batch_size=ctx.batch_size, seed=ctx.seed
        )

    def batching(self) -> dict[str, Any]:
        return batching_policy(self.context.batch_size)
