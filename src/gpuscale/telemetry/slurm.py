"""Slurm jobs per GPU, from the files AMD's Slurm prolog writes.

AMD's device-metrics-exporter labels GPU series with the Slurm job holding the
GPU (``job_id``, ``job_user``, ``job_partition``, and the job's cluster). Its
prolog script writes one JSON file per allocated GPU into ``/var/run/exporter/``
(``SLURM_JOB_ID``, ``SLURM_JOB_USER``, ``SLURM_JOB_PARTITION``,
``SLURM_CLUSTER_NAME``, and the job's GPU indices in ``CUDA_VISIBLE_DEVICES``);
its epilog removes the file. This module reads that directory the same way, so
the same prolog and epilog work with gpuscale. Files are parsed again only when
they change, and a file that is not valid JSON is logged once and skipped.
"""

import json
import logging
import os
from dataclasses import dataclass
from pathlib import Path

logger = logging.getLogger(__name__)

#: Where AMD's prolog writes; ``GPUSCALE_SLURM_JOB_DIR`` overrides it.
DEFAULT_JOB_DIR = "/var/run/exporter"
JOB_DIR_ENV = "GPUSCALE_SLURM_JOB_DIR"


@dataclass(frozen=True, slots=True)
class SlurmJob:
    """The job holding a GPU, as the exporter labels it."""

    job_id: str
    user: str
    partition: str
    cluster: str


class SlurmJobs:
    """GPU index -> Slurm job, from the prolog's files.

    Args:
        folder: The directory the prolog writes; ``GPUSCALE_SLURM_JOB_DIR`` or
            ``/var/run/exporter`` when None. A missing directory means no jobs.
    """

    def __init__(self, folder: str | None = None) -> None:
        self._folder = Path(folder or os.environ.get(JOB_DIR_ENV) or DEFAULT_JOB_DIR)
        self._parsed: dict[str, tuple[tuple[int, int], dict[str, str] | None]] = {}

    def by_gpu(self) -> dict[int, SlurmJob]:
        """Jobs by GPU index, as the files say now.

        Returns:
            GPU index to job; empty when the directory is absent or empty.
        """
        try:
            entries = [e for e in os.scandir(self._folder) if e.is_file()]
        except OSError:
            return {}
        jobs: dict[int, SlurmJob] = {}
        seen = set()
        for entry in sorted(entries, key=lambda e: e.name):
            seen.add(entry.name)
            env = self._read(entry)
            if env is None:
                continue
            job = SlurmJob(
                env.get("SLURM_JOB_ID", ""),
                env.get("SLURM_JOB_USER", ""),
                env.get("SLURM_JOB_PARTITION", ""),
                env.get("SLURM_CLUSTER_NAME", ""),
            )
            for gpu in env.get("CUDA_VISIBLE_DEVICES", "").split(","):
                if gpu.strip().isdigit():
                    jobs[int(gpu)] = job
        for gone in set(self._parsed) - seen:
            del self._parsed[gone]
        return jobs

    def _read(self, entry: os.DirEntry[str]) -> dict[str, str] | None:
        try:
            stat = entry.stat()
        except OSError:
            return None
        stamp = (stat.st_mtime_ns, stat.st_size)
        cached = self._parsed.get(entry.name)
        if cached is not None and cached[0] == stamp:
            return cached[1]
        env: dict[str, str] | None = None
        try:
            loaded = json.loads(Path(entry.path).read_text())
            if isinstance(loaded, dict):
                env = {str(k): str(v) for k, v in loaded.items()}
        except (OSError, ValueError) as err:
            logger.warning("Slurm job file %s is not readable JSON, skipped: %s", entry.path, err)
        self._parsed[entry.name] = (stamp, env)
        return env
