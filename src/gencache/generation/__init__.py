"""Generation: the effective generation settings, the teacher, finish rules and the engines that run it, and
``tiny`` (the tiny random-weight teacher that the demo and the tests build locally)."""
