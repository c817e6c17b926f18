"""Helpers of the tests: a package copied with edits, and the pt2run binary of the build under test."""

import json
import os
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def copy_package(src, dst, edit_spec=None, records=None):
    """A copy of package `src` at `dst`: its pt2rt spec through edit_spec(spec) -> spec, records replaced by
    `records` (name -> bytes)."""
    from torch.export.pt2_archive._package import PT2ArchiveReader, PT2ArchiveWriter

    from export_tools.layout import SPEC_KEY
    records = records or {}
    with PT2ArchiveReader(str(src)) as reader, PT2ArchiveWriter(str(dst)) as writer:
        for name in reader.get_file_names():
            if name == ".data/serialization_id" or name in records:
                continue
            data = reader.read_bytes(name)
            if edit_spec and name.endswith("_metadata.json"):
                metadata = json.loads(data)
                metadata[SPEC_KEY] = json.dumps(edit_spec(json.loads(metadata[SPEC_KEY])))
                data = json.dumps(metadata).encode()
            writer.write_bytes(name, data)
        for name, data in records.items():
            writer.write_bytes(name, data)
    return dst


def pt2run_path() -> Path:
    """$PT2RUN, else the pt2run next to the ops library under test (IDENTITY_CONV_OPS_LIBRARY: <build>/lib/...)."""
    candidates = [Path(os.environ["PT2RUN"])] if os.environ.get("PT2RUN") else []
    if os.environ.get("IDENTITY_CONV_OPS_LIBRARY"):
        candidates.append(Path(os.environ["IDENTITY_CONV_OPS_LIBRARY"]).resolve().parent.parent / "bin" / "pt2run")
    candidates.append(ROOT / "build" / "cpu-release" / "bin" / "pt2run")
    for c in candidates:
        if c.is_file():
            return c
    raise AssertionError(f"pt2run not found (tried {', '.join(map(str, candidates))}); build first or set PT2RUN")


def pt2run(*args, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([str(pt2run_path()), *map(str, args)], capture_output=True, text=True, timeout=300, **kw)
