"""Finish rules shared by every engine: where an answer ends and why.

For each generated position, in order, a sequence finishes at the first of:

1. ``eos``: the token is in the EOS list (the EOS token is kept);
2. ``stop_string``: the decoded tail of the answer (``skip_special_tokens=False``) now contains a stop string (the
   token that completed it is kept; the answer is cut there even when the engine generated more);
3. ``length``: ``max_new_tokens`` tokens exist.

The same rule runs in every engine (on a static batch as a stopping criterion), so a stop string completes at the
same token in each. Beam search cuts each hypothesis after its first EOS token, where beam search makes it final.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from gencache.artifact.names import FINISH_REASONS

if TYPE_CHECKING:
    import torch

    from gencache.generation.effective import EffectiveGeneration


FINISH_EOS, FINISH_STOP_STRING, FINISH_LENGTH = FINISH_REASONS


class FinishScanner:
    """The finish rule for one growing token list. A stop string is looked for in the decoded last ``window``
    tokens: every token carries at least one byte, and the margin covers a partial UTF-8 character or a
    decoder-stripped leading space at the start of the window."""

    def __init__(self, generation: EffectiveGeneration, tokenizer: Any) -> None:
        self.eos = frozenset(generation.eos_token_ids)
        self.stop_strings = generation.stop_strings
        self.tokenizer = tokenizer
        self.window = max((len(s.encode("utf-8")) for s in self.stop_strings), default=0) + 4
        self.max_new_tokens = generation.max_new_tokens

    def scan(self, tokens: Sequence[int], start: int = 0) -> tuple[int, str] | None:
        """Check positions ``start..len(tokens)-1``; ``(tokens to keep, finish reason)`` at the first finish, else
        None (the sequence is still open)."""
        for position in range(start, len(tokens)):
            step = position + 1
            if int(tokens[position]) in self.eos:
                return step, FINISH_EOS
            if self.stop_strings:
                tail = list(tokens[max(0, step - self.window) : step])
                text = self.tokenizer.decode(tail, skip_special_tokens=False)
                if any(stop in text for stop in self.stop_strings):
                    return step, FINISH_STOP_STRING
            if step >= self.max_new_tokens:
                return step, FINISH_LENGTH
        return None


class FinishRecorder:
    """A stopping criterion of ``generate`` that records, per row of a static batch, the step at which it finished
    and why. It has no ``eos_token_id`` attribute, which transformers would read as "an EOS criterion"."""

    def __init__(self, scanner: FinishScanner, *, prompt_width: int, rows: int) -> None:
        self.scanner = scanner
        self.prompt_width = prompt_width
        self.tokens: list[list[int]] = [[] for _ in range(rows)]
        self.finished: list[tuple[int, str] | None] = [None] * rows

    def __call__(self, input_ids: torch.Tensor, scores: Any = None, **kwargs: Any) -> torch.Tensor:
        import torch

        start = self.prompt_width + len(self.tokens[0])
        for row, new in enumerate(input_ids[:, start:].tolist()):
            tokens = self.tokens[row]
            tokens.extend(new)
            if self.finished[row] is None:
                self.finished[row] = self.scanner.scan(tokens, len(tokens) - len(new))
        return torch.tensor([found is not None for found in self.finished], device=input_ids.device)
