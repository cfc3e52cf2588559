"""A writer of an artifact on a bucket in a child process (``python s3_writer.py URL MIB [pause]``): it writes
MIB mebibytes of entries through ``ArtifactBuild``, says ``ready`` once a payload part is on the server, waits for
a line on stdin when ``pause`` is given, then commits. A failure prints its one line and exits with its code."""

from __future__ import annotations

import hashlib
import sys

import numpy as np

from gencache.artifact.header import header_capacity
from gencache.artifact.writer import ArtifactBuild
from gencache.core.errors import GencacheError
from support.storage_helpers import PROVENANCE, RESOLVED

ENTRY_TOKENS = 131_072  # 1 MiB of int64 tokens per entry


def main(url: str, mebibytes: int, pause: bool) -> int:
    keys = [hashlib.sha256(str(i).encode()).hexdigest() for i in range(mebibytes)]
    try:
        with ArtifactBuild(
            url, provenance=PROVENANCE, header_capacity=header_capacity(len(keys), 1, ENTRY_TOKENS)
        ) as b:
            for i, key in enumerate(keys):
                b.writer.add(key, [np.full(ENTRY_TOKENS, i, dtype="<i8").tobytes()], [str(i)], ["length"])
            print("ready", flush=True)
            if pause:
                sys.stdin.readline()
            b.writer.finalize(resolved_config=RESOLVED, summary={})
            b.publish()
    except GencacheError as error:
        print(f"error: {error}", file=sys.stderr)
        return error.exit_code
    print("published", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], int(sys.argv[2]), len(sys.argv) > 3))
