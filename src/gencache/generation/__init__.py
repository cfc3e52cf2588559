"""Generation: the effective generation settings, the teacher, finish rules and the engines that run it."""

__all__: list[str] = []
