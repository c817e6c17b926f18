"""The errors export_tools raises, one family: catch ExportError for any of them. Each says in one line what was
wrong and what was expected; nothing was written when one is raised."""


class ExportError(Exception):
    """A problem with what the caller asked for, said in one line; nothing was written."""


class CpuVariantError(ExportError):
    """A CPU variant or target that cannot be compiled here (its tools, an unknown name)."""


class DynamicShapesError(ExportError, ValueError):
    """What is wrong with the dynamic dims asked for."""


class OpsLibraryError(ExportError, RuntimeError):
    """An ops library could not be loaded, or which library provides a namespace is not known."""
