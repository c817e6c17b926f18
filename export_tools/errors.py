"""The errors export_tools raises, one family: catch ExportError for any of them. Each says in one line what was
wrong and what was expected; nothing was written when one is raised."""


class ExportError(Exception):
    """A problem with what the caller asked for, said in one line; nothing was written."""


class CpuVariantError(ExportError):
    """A CPU variant or target that cannot be compiled here (its tools, an unknown name)."""


class TargetTorchError(ExportError):
    """The libtorch of a cross target is missing, or fetch-target could not download or unpack it."""


class DynamicShapesError(ExportError, ValueError):
    """What is wrong with the dynamic dims asked for."""


class OpsLibraryError(ExportError, RuntimeError):
    """An ops library could not be loaded, or which library provides a namespace is not known."""


class ScaffoldError(ExportError, ValueError):
    """A project new-op cannot write (a bad name, a folder in the way)."""


def first_line(err: BaseException) -> str:
    """An exception's message, first line only (its type's name when it has none): what an ExportError quotes."""
    text = str(err).strip()
    return text.splitlines()[0] if text else type(err).__name__
