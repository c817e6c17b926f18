"""The project's version: the VERSION file of the checkout (the one place it is written), else the installed
package's metadata (built from that file)."""

from pathlib import Path


def read() -> str:
    source = Path(__file__).resolve().parent.parent / "VERSION"
    if source.is_file():
        return source.read_text().strip()
    from importlib.metadata import version
    return version("export_tools")
