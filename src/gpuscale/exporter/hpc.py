"""HPC job labels: dcgm-exporter's ``--hpc-job-mapping-dir``.

A batch scheduler's prolog writes one file per GPU into a directory, named by
the GPU index (``0``) or, for a MIG instance, ``<gpu>.<instance>`` (``0.3``),
one job id per line; the epilog removes it. Each series of that entity is then
written once per job with an ``hpc_job`` label, as dcgm-exporter does, so
per-job dashboards need no Kubernetes. The directory is read at every collect:
the files change as jobs start and end.
"""

import logging
from pathlib import Path

from gpuscale.telemetry.base import GpuInfo

logger = logging.getLogger(__name__)

HPC_JOB = "hpc_job"


def job_key(info: GpuInfo) -> str:
    """The file name that holds ``info``'s jobs: ``<gpu>`` or ``<gpu>.<instance>``."""
    if info.mig_instance_id is None:
        return str(info.index)
    return f"{info.index}.{info.mig_instance_id}"


class JobMap:
    """Reads the mapping directory; a missing or unreadable one is logged once, not fatal.

    Args:
        directory: The mapping directory.
    """

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self._warned = False

    def read(self) -> dict[str, list[str]]:
        """File name to the job ids it lists (blank lines skipped).

        Returns:
            An empty map when the directory cannot be read.
        """
        jobs: dict[str, list[str]] = {}
        try:
            files = sorted(p for p in self.directory.iterdir() if p.is_file())
            for path in files:
                lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
                jobs[path.name] = [line.strip() for line in lines if line.strip()]
        except OSError as exc:
            if not self._warned:
                logger.warning(
                    "--hpc-job-mapping-dir %s: cannot read (%s); no hpc_job labels until it can",
                    self.directory,
                    exc.strerror or exc,
                )
                self._warned = True
            return {}
        self._warned = False
        return jobs
