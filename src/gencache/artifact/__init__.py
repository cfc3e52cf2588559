"""The artifact: format 3 on disk (names, header, manifest), writing, publishing, reading and verifying.

Nothing in this package imports transformers; only the reader imports torch (to map the payload).
"""

__all__: list[str] = []
