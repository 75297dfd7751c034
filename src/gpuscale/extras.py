"""Which optional extra installs which library, so that a missing one names what to install.

The base install is the exporter and the controller. The simulator and the
evaluation (``[sim]``), the forecasting policies (``[forecast]``), AMD GPUs
(``[amd]``) and distributed evaluation (``[dask]``) bring their own libraries;
a command that reaches one of those without its extra ends with one line saying
which extra to install, never a traceback.
"""

import importlib.util

from gpuscale.errors import PermanentError

EXTRA_OF_LIBRARY = {
    "numba": "sim",
    "llvmlite": "sim",
    "pandas": "sim",
    "scipy": "sim",
    "matplotlib": "sim",
    "statsmodels": "forecast",
    "dask": "dask",
    "distributed": "dask",
    "amdsmi": "amd",
}
"""Top-level import name to the extra (``pip install 'gpuscale[EXTRA]'``) that installs it."""


class MissingExtraError(PermanentError):
    """A command needs a library of an optional extra that is not installed. Exit status 1."""


def missing_extra(exc: ModuleNotFoundError, needed_by: str) -> MissingExtraError | None:
    """The one-line error for an import that failed because an extra is not installed.

    Args:
        exc: The failed import.
        needed_by: What needed it, e.g. ``gpuscale evaluate``.

    Returns:
        The error to raise, or None when the missing module belongs to no extra
        (a broken install, or a bug: the caller re-raises the original).
    """
    library = (exc.name or "").partition(".")[0]
    extra = EXTRA_OF_LIBRARY.get(library)
    if extra is None:
        return None
    return MissingExtraError(
        f"{needed_by} needs {library}, which is not installed:"
        f" install the {extra!r} extra with pip install 'gpuscale[{extra}]'"
    )


def require_library(library: str, needed_by: str) -> None:
    """Fail now, with the one-line error, when ``library`` of an extra is not installed.

    For what imports its library only when it first uses it (a forecasting policy
    fits its seasonal model after hours of history): checked when it is built.

    Args:
        library: A top-level import name of ``EXTRA_OF_LIBRARY``.
        needed_by: What needs it, e.g. ``the predictive policy``.

    Raises:
        MissingExtraError: It is not installed.
    """
    if importlib.util.find_spec(library) is None:
        error = missing_extra(ModuleNotFoundError(name=library), needed_by)
        if error is not None:
            raise error
