"""Field catalogues: what each exported GPU series means, its type and its unit.

NVIDIA series keep DCGM's field names so that dashboards and rules written for
dcgm-exporter work unchanged; AMD series keep the names AMD's
device-metrics-exporter uses. Both catalogues share one ``Field`` record.
"""

from gpuscale.fields.catalogue import DCGM_FIELDS, Field, MetricType, dcgm_field
from gpuscale.fields.counters import (
    DEFAULT_COUNTERS_CSV,
    Counter,
    default_counters,
    parse_counters,
    read_counters,
)

__all__ = [
    "DCGM_FIELDS",
    "DEFAULT_COUNTERS_CSV",
    "Counter",
    "Field",
    "MetricType",
    "dcgm_field",
    "default_counters",
    "parse_counters",
    "read_counters",
]
