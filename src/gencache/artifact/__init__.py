"""The artifact: format 3 on disk (names, header, manifest), writing, publishing, reading and verifying.

Nothing in this package imports transformers; only a reader imports torch, when it builds its first tensor (to map
the payload).
"""
