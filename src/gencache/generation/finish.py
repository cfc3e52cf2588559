"""Finish rules shared by every engine: where an answer ends and why.

For each generated position, in order, a sequence finishes at the first of:

1. ``eos``: the token is in the EOS list (the EOS token is kept);
2. ``stop_string``: the decoded tail of the answer (``skip_special_tokens=False``) now contains a stop string (the
   token that completed it is kept; the answer is cut there even when the engine generated more);
3. ``length``: ``max_new_tokens`` tokens exist.

:class:`FinishRecorder` applies the rule to a whole static batch as a stopping criterion of ``generate``;
:class:`FinishScanner` applies it to one sequence's token list, incrementally (the continuous and vLLM engines).
Both use one :class:`StopStringMatcher`, so a stop string completes at the same token in every engine. Beam search
uses :func:`cut_at_first_eos` (a beam hypothesis is final at its first EOS token).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from gencache.artifact.names import FINISH_REASONS

if TYPE_CHECKING:
    import torch


FINISH_EOS, FINISH_STOP_STRING, FINISH_LENGTH = FINISH_REASONS
#: The codes :class:`FinishRecorder` keeps per row (0: not finished yet) and the reasons they stand for.
_CODE_EOS, _CODE_STOP_STRING, _CODE_LENGTH = 1, 2, 3
_RECORDED_REASONS = {_CODE_EOS: FINISH_EOS, _CODE_STOP_STRING: FINISH_STOP_STRING, _CODE_LENGTH: FINISH_LENGTH}


class StopStringMatcher:
    """Whether a window of answer tokens, decoded with ``skip_special_tokens=False``, contains a stop string.

    The window is long enough to hold any stop string: byte-level tokens carry at least one byte each; the margin
    covers a partial UTF-8 character or a decoder-stripped leading space at the start of the window.
    """

    def __init__(self, stop_strings: Sequence[str], tokenizer: Any) -> None:
        self.stop_strings = tuple(stop_strings)
        self.tokenizer = tokenizer
        self.window = max((len(s.encode("utf-8")) for s in self.stop_strings), default=0) + 4

    def hit(self, tokens: Sequence[int], end: int) -> bool:
        """True when ``tokens[:end]``'s last ``window`` tokens contain a stop string."""
        tail = list(tokens[max(0, end - self.window) : end])
        text = self.tokenizer.decode(tail, skip_special_tokens=False)
        return any(stop in text for stop in self.stop_strings)

    def hits(self, tails: Sequence[Sequence[int]]) -> list[bool]:
        """:meth:`hit` for several windows at once (one ``batch_decode``)."""
        texts = self.tokenizer.batch_decode([list(tail) for tail in tails], skip_special_tokens=False)
        return [any(stop in text for stop in self.stop_strings) for text in texts]


class FinishScanner:
    """The finish rule for one sequence at a time: :meth:`scan` examines new positions of a growing token list."""

    def __init__(
        self, *, eos_token_ids: Sequence[int], stop_strings: Sequence[str], tokenizer: Any, max_new_tokens: int
    ) -> None:
        self.eos = frozenset(int(token) for token in eos_token_ids)
        self.matcher = StopStringMatcher(stop_strings, tokenizer) if stop_strings else None
        self.max_new_tokens = max_new_tokens

    def scan(self, tokens: Sequence[int], start: int = 0) -> tuple[int, str] | None:
        """Check positions ``start..len(tokens)-1``; ``(tokens to keep, finish reason)`` at the first finish, else
        None (the sequence is still open)."""
        for position in range(start, len(tokens)):
            step = position + 1
            if int(tokens[position]) in self.eos:
                return step, FINISH_EOS
            if self.matcher is not None and self.matcher.hit(tokens, step):
                return step, FINISH_STOP_STRING
            if step >= self.max_new_tokens:
                return step, FINISH_LENGTH
        return None


class FinishRecorder:
    """A stopping criterion that records, per row, the step at which it finished and why.

    It is called by ``generate`` after every decoding step with the whole ``input_ids`` (prompt width plus the
    tokens generated so far) and examines each new position once. A still-open row finishes at a step when its
    token is in the EOS list (``eos``), when the decoded generated tail now contains a stop string (``stop_string``,
    through the token that completed it), or when ``max_new_tokens`` tokens exist (``length``). It returns True for
    every finished row, so transformers stops once all rows are finished. Lengths count generated tokens kept.

    It deliberately has no ``eos_token_id`` attribute, which transformers would read as "an EOS criterion".
    """

    def __init__(
        self,
        *,
        prompt_width: int,
        rows: int,
        eos_token_ids: Sequence[int],
        stop_strings: Sequence[str],
        tokenizer: Any,
        max_new_tokens: int,
        device: torch.device,
    ) -> None:
        import torch

        self.prompt_width = prompt_width
        self.max_new_tokens = max_new_tokens
        self.matcher = StopStringMatcher(stop_strings, tokenizer)
        self.stop_strings = self.matcher.stop_strings
        self.lengths = torch.zeros(rows, dtype=torch.long, device=device)
        self.codes = torch.zeros(rows, dtype=torch.uint8, device=device)
        self.eos = torch.tensor(list(eos_token_ids), dtype=torch.long, device=device) if eos_token_ids else None
        self.checked = 0

    def _finish(self, hit: torch.Tensor, step: int, code: int) -> None:
        import torch

        self.lengths = torch.where(hit, step, self.lengths)
        self.codes = torch.where(hit, code, self.codes)

    def _stop_string_hits(self, input_ids: torch.Tensor, position: int) -> torch.Tensor | None:
        import torch

        open_rows = (self.lengths == 0).nonzero().flatten().tolist()
        if not open_rows:
            return None
        start = self.prompt_width + max(0, position + 1 - self.matcher.window)
        end = self.prompt_width + position + 1
        tails = input_ids[open_rows, start:end].tolist()
        flags = self.matcher.hits(tails)
        hits = [row for row, hit in zip(open_rows, flags, strict=True) if hit]
        if not hits:
            return None
        mask = torch.zeros_like(self.lengths, dtype=torch.bool)
        mask[hits] = True
        return mask

    def __call__(self, input_ids: torch.Tensor, scores: Any = None, **kwargs: Any) -> torch.Tensor:
        import torch

        generated = input_ids.shape[1] - self.prompt_width
        for position in range(self.checked, generated):
            step = position + 1
            if self.eos is not None:
                token = input_ids[:, self.prompt_width + position]
                self._finish((self.lengths == 0) & torch.isin(token, self.eos), step, _CODE_EOS)
            if self.stop_strings:
                hit = self._stop_string_hits(input_ids, position)
                if hit is not None:
                    self._finish(hit & (self.lengths == 0), step, _CODE_STOP_STRING)
            if step >= self.max_new_tokens:
                self._finish(self.lengths == 0, step, _CODE_LENGTH)
        self.checked = max(self.checked, generated)
        return self.lengths > 0

    def results(self, generated_width: int) -> tuple[list[int], list[str]]:
        """Per row: tokens to keep and finish reason. Rows never recorded (generation ended for another reason)
        keep everything generated and finish by ``length``."""
        lengths = self.lengths.tolist()
        codes = self.codes.tolist()
        out_lengths: list[int] = []
        reasons: list[str] = []
        for length, code in zip(lengths, codes, strict=True):
            if length == 0:
                out_lengths.append(generated_width)
                reasons.append(FINISH_LENGTH)
            else:
                out_lengths.append(int(length))
                reasons.append(_RECORDED_REASONS[int(code)])
        return out_lengths, reasons


def cut_at_first_eos(generated: torch.Tensor, eos_token_ids: Sequence[int]) -> tuple[list[int], list[str]]:
    """Beam-search cut: a beam hypothesis is final at its first EOS token, so keep through the first EOS id of each
    row (``eos``) or the whole row (``length``)."""
    import torch

    rows, width = generated.shape
    if not eos_token_ids or width == 0:
        return [width] * rows, [FINISH_LENGTH] * rows
    eos = torch.tensor(list(eos_token_ids), dtype=generated.dtype, device=generated.device)
    hits = torch.isin(generated, eos)
    found = hits.any(dim=1).tolist()
    first = hits.to(torch.int8).argmax(dim=1).tolist()
    lengths = [int(f) + 1 if ok else width for f, ok in zip(first, found, strict=True)]
    reasons = [FINISH_EOS if ok else FINISH_LENGTH for ok in found]
    return lengths, reasons
