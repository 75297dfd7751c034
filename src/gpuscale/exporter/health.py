"""DCGM_EXP_GPU_HEALTH_STATUS without a DCGM host engine.

dcgm-exporter asks DCGM's health watches (``dcgmHealthCheck``) and writes one
series per watch: ``health_watch`` (PCIE, NVLINK, PMU, MCU, MEM, SM, INFOROM,
THERMAL, POWER, DRIVER, ALL), ``health_error_code`` (``DCGM_FR_*``) and the
result (0 pass, 10 warn, 20 fail). There is no host engine here, so each watch
is judged from the fields every source already reports, by the rules DCGM's
watches document:

- MEM: a volatile double-bit ECC error or a failed row remap fails
  (``DCGM_FR_VOLATILE_DBE_DETECTED``, ``DCGM_FR_ROW_REMAP_FAILURE``); pages
  pending retirement warn (``DCGM_FR_PENDING_PAGE_RETIREMENTS``).
- PCIE: more than 8 PCIe replays a minute warn (``DCGM_FR_PCI_REPLAY_RATE``).
- NVLINK: a new NVLink recovery error warns (``DCGM_FR_NVLINK_ERROR_THRESHOLD``).
- THERMAL / POWER: a thermal or power-brake clock event warns
  (``DCGM_FR_CLOCK_THROTTLE_THERMAL`` / ``_POWER``); a whole GPU whose power
  draw is unreadable warns (``DCGM_FR_POWER_UNREADABLE``; MIG instances have none).
- ALL: the worst of the others. PMU, MCU, SM, INFOROM and DRIVER have no
  NVML-visible signal and pass.
"""

from dataclasses import dataclass, field

from gpuscale.telemetry.base import DeviceSample

PASS, WARN, FAIL = 0, 10, 20
WATCHES = ("PCIE", "NVLINK", "PMU", "MCU", "MEM", "SM", "INFOROM", "THERMAL", "POWER", "DRIVER")
PCIE_REPLAYS_PER_MINUTE = 8.0  # DCGM's PCIe watch threshold (DCGM_FR_PCI_REPLAY_RATE)
_D = "DCGM_FI_DEV_"
_THERMAL_BITS = 0x20 | 0x40  # sw_thermal, hw_thermal
_POWER_BITS = 0x80  # hw_power_brake


@dataclass(slots=True)
class HealthJudge:
    """Judges each watch of an entity; keeps the previous counters to see rates."""

    _last: dict[str, tuple[float, float, float]] = field(default_factory=dict)

    def judge(self, device: DeviceSample, now: float) -> list[tuple[str, str, int]]:
        """``(health_watch, health_error_code, result)`` for every watch, then ALL.

        Args:
            device: The entity's sample.
            now: The snapshot's time, seconds.
        """
        v = device.values
        verdict = {w: (PASS, "DCGM_FR_OK") for w in WATCHES}
        if v.get(f"{_D}ECC_DBE_VOL_TOTAL", 0) > 0:
            verdict["MEM"] = (FAIL, "DCGM_FR_VOLATILE_DBE_DETECTED")
        elif v.get(f"{_D}ROW_REMAP_FAILURE", 0) > 0:
            verdict["MEM"] = (FAIL, "DCGM_FR_ROW_REMAP_FAILURE")
        elif v.get(f"{_D}RETIRED_PENDING", 0) > 0:
            verdict["MEM"] = (WARN, "DCGM_FR_PENDING_PAGE_RETIREMENTS")
        reasons = int(v.get(f"{_D}CLOCKS_EVENT_REASONS", 0))
        if reasons & _THERMAL_BITS:
            verdict["THERMAL"] = (WARN, "DCGM_FR_CLOCK_THROTTLE_THERMAL")
        if reasons & _POWER_BITS:
            verdict["POWER"] = (WARN, "DCGM_FR_CLOCK_THROTTLE_POWER")
        elif f"{_D}POWER_USAGE" not in v and device.info.mig_instance_id is None:
            verdict["POWER"] = (WARN, "DCGM_FR_POWER_UNREADABLE")
        replays = v.get(f"{_D}PCIE_REPLAY_COUNTER")
        recoveries = v.get(f"{_D}NVLINK_RECOVERY_ERROR_COUNT_TOTAL")
        key = device.info.key
        last = self._last.get(key)
        if last is not None:
            then, old_replays, old_recoveries = last
            minutes = (now - then) / 60.0
            rate = (replays - old_replays) / minutes if replays is not None and minutes > 0 else 0
            if rate > PCIE_REPLAYS_PER_MINUTE:
                verdict["PCIE"] = (WARN, "DCGM_FR_PCI_REPLAY_RATE")
            if recoveries is not None and recoveries > old_recoveries:
                verdict["NVLINK"] = (WARN, "DCGM_FR_NVLINK_ERROR_THRESHOLD")
        self._last[key] = (
            now,
            replays if replays is not None else 0.0,
            recoveries if recoveries is not None else 0.0,
        )
        out = [(w, code, result) for w, (result, code) in verdict.items()]
        worst = max(verdict.values(), key=lambda rc: rc[0])
        out.append(("ALL", worst[1], worst[0]))
        return out
