"""``FleetPhysics.fields(names)``: the named fields exactly as ``fields()`` gives them.

The simulator asks only for the fields a policy reads; what it gets must be the
very values of the full read, on healthy, throttling, lost and ECC-hit GPUs alike.
"""

import numpy as np
import pytest

from gpuscale.telemetry.physics import GPU_MODELS, FleetPhysics

SUBSETS = [
    ["DCGM_FI_DEV_GPU_UTIL"],
    ["DCGM_FI_PROF_SM_ACTIVE"],
    ["DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_XID_ERRORS", "DCGM_FI_DEV_MEMORY_TEMP"],
    ["DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL", "DCGM_FI_DEV_PCIE_RX_THROUGHPUT"],
]


@pytest.mark.parametrize("model", ["H100", "A100", "L4", "V100"])
def test_named_fields_equal_the_full_read(model: str) -> None:
    rng = np.random.default_rng(7)
    fleet = FleetPhysics([GPU_MODELS[model]] * 12, seed=3)
    fleet.inject_thermal(2, 60.0)  # throttles once hot
    for step in range(40):
        if step == 10:
            fleet.inject_xid(5, 79, float(step))  # falls off the bus: NaN fields
        if step == 12:
            fleet.inject_ecc_dbe(6, float(step))
        fleet.step(
            30.0,
            np.full(12, 0.95),
            rng.random(12) * 1e9,
            batch_fill=rng.random(12),
            prefill_share=0.4,
            kv_cache_bytes=rng.random(12) * 1e8,
            sampled_busy=rng.random(12),
        )
        full = fleet.fields()
        for names in SUBSETS:
            part = fleet.fields(names)
            for name in names:
                assert np.array_equal(part[name], full[name], equal_nan=True), name
    assert fleet._counters["DCGM_FI_DEV_THERMAL_VIOLATION"][2] > 0  # it did throttle
    assert np.isnan(fleet.fields(["DCGM_FI_DEV_GPU_UTIL"])["DCGM_FI_DEV_GPU_UTIL"][5])
