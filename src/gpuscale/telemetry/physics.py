"""Simulated GPU device physics, vectorised over a whole fleet.

The sim telemetry source and the cluster simulator need GPU telemetry a GPU engineer
would accept, for up to 10,000 GPUs at once: power between idle and TDP, a die
temperature that lags power, clocks that fall when the card is too hot or at its power
limit, DCGM's counters in DCGM's units. Every per-GPU quantity is a numpy array, so a
step costs the same few dozen array operations whatever the fleet size.

Per GPU, for a step of ``dt`` seconds with the load held over the step:

* Activity (``activity.py``): GPU_UTIL is the busy share, the time a kernel runs; the
  profiling ratios are the busy share times their level while busy, which follows the
  batch fill and the prefill/decode mix when the caller gives them.
* Dynamic power follows activity and DVFS, ``P = idle + (TDP - idle) * d * c**3`` with
  ``c`` the SM clock as a share of the maximum and ``d`` the demand: the workload's
  power intensity times the activity index (SM, tensor and DRAM activity weighted)
  relative to the mix's at full busy, with 1 % deterministic jitter.
* Power limit: ``c`` drops until ``P <= limit`` (TDP unless a fault lowered it);
  DCGM_FI_DEV_POWER_VIOLATION counts that time. At TDP the clock stays at or above
  base; under a lowered limit it may fall to the idle clock, as a power brake does.
* Clock cap: a straggler's clock is held at a share of boost whatever its load
  (``set_clock_cap``); it counts as no power or thermal violation.
* Temperature: ``dT/dt = (T_eq - T) / tau`` with ``T_eq = ambient + extra + R * P``,
  solved exactly, so a 15 s step lands where fifteen 1 s steps would.
* Thermal limit (``thermal.py``): once ``T`` reaches the slowdown temperature, ``c``
  drops so that ``T_eq`` equals it; DCGM_FI_DEV_THERMAL_VIOLATION counts the time
  from the crossing. A card that passes its shutdown temperature falls off the bus.
"""

import logging
from collections.abc import Callable, Collection, Sequence

import numpy as np

from gpuscale.errors import ConfigError
from gpuscale.fields import DCGM_FIELDS
from gpuscale.telemetry import fleetfields as ff
from gpuscale.telemetry.activity import (
    LLM_PHASES,
    RATIO_FIELDS,
    ServingActivity,
    activity_index,
    mix_levels,
    phase_levels,
    ratio_rows,
)
from gpuscale.telemetry.gpus import GPU_MODELS, MIB, GpuModel, gpu_model
from gpuscale.telemetry.loads import LLM_SERVING, ActivityMix
from gpuscale.telemetry.thermal import Decay, ThermalModel, throttle

# The catalogue moved to gpus.py; importers of these names from here keep working.
__all__ = [
    "GPU_MODELS",
    "IDLE_BUSY",
    "MIB",
    "POWER_JITTER",
    "SBE_RATE_PER_S",
    "XID_DBE",
    "XID_FELL_OFF_BUS",
    "XID_ROW_REMAP_FAILURE",
    "FleetPhysics",
    "GpuModel",
    "gpu_model",
]

logger = logging.getLogger(__name__)

_NS = 1e9  # DCGM violation counters are in nanoseconds


IDLE_BUSY = 0.01  # below this busy share the driver drops to the idle clock
POWER_JITTER = 0.01  # relative standard deviation of dynamic power, step to step
SBE_RATE_PER_S = 1e-7  # correctable ECC errors per GPU-second (rare, as in healthy fleets)
XID_FELL_OFF_BUS, XID_DBE, XID_ROW_REMAP_FAILURE = 79, 48, 64


class FleetPhysics:
    """The physical state of ``n`` GPUs, advanced together.

    Args:
        models: One model per GPU.
        ambient_c: Inlet air temperature.
        seed: Seeds per-GPU silicon variation (±2 % dynamic power) and step jitter.
        resident_bytes: Framebuffer held by the loaded model, per GPU or for all.
        mix: Power intensity, and the activity levels while busy when a step gives
            neither batch fill nor phase.
        start_s: Clock value at construction; XID events are stamped on this clock.
        activity: Profiling levels by phase and batch fill, and the power weights.
        kv_pool_bytes: KV cache the server allocates up front (vLLM's pool), per GPU or
            for all; FB_USED counts the larger of it and the KV cache in use. 0: on demand.
    """

    def __init__(
        self,
        models: Sequence[GpuModel],
        *,
        ambient_c: float = 25.0,
        seed: int = 0,
        resident_bytes: float | np.ndarray = 0.0,
        mix: ActivityMix = LLM_SERVING,
        start_s: float = 0.0,
        activity: ServingActivity = LLM_PHASES,
        kv_pool_bytes: float | np.ndarray = 0.0,
    ) -> None:
        if not models:
            raise ConfigError("a simulated fleet needs at least one GPU model")
        self.n = len(models)
        self.ambient_c = float(ambient_c)
        self.mix, self.activity = mix, activity
        self.time_s = float(start_s)
        self._rng = np.random.default_rng(seed)
        kinds = list(dict.fromkeys(models))
        which = np.fromiter((kinds.index(m) for m in models), dtype=np.intp, count=self.n)

        def per_gpu(attr: str) -> np.ndarray:
            return np.array([float(getattr(k, attr)) for k in kinds])[which]

        self._tdp, self._idle = per_gpu("tdp_w"), per_gpu("idle_w")
        self._max_mhz, self._idle_mhz = per_gpu("max_sm_clock_mhz"), per_gpu("idle_sm_clock_mhz")
        self._base_frac = per_gpu("base_sm_clock_mhz") / self._max_mhz
        self._floor_frac = self._idle_mhz / self._max_mhz
        self._mem_mhz = per_gpu("mem_clock_mhz")
        self._slowdown, self._shutdown = per_gpu("slowdown_temp_c"), per_gpu("shutdown_temp_c")
        self._r = per_gpu("thermal_resistance_c_per_w")
        self._tau = per_gpu("thermal_time_constant_s")
        self._pcie, self._nvlink = per_gpu("pcie_bytes_per_s"), per_gpu("nvlink_bytes_per_s")
        self._total_mib = np.floor(per_gpu("memory_bytes") / MIB)
        self._reserved_mib = per_gpu("fb_reserved_mib")
        self._remap = per_gpu("row_remapping") > 0
        spread = np.clip(self._rng.standard_normal(self.n), -2.0, 2.0)
        self._intensity = mix.power_intensity * (1.0 + 0.01 * spread)
        self._resident = np.broadcast_to(np.asarray(resident_bytes, dtype=float), (self.n,)).copy()
        self._kv_pool = self._per_gpu(kv_pool_bytes, "kv_pool_bytes")
        self._working, self._extra_c = np.zeros(self.n), np.zeros(self.n)
        self._kv = np.zeros(self.n)
        self._mix_levels = mix_levels(mix, self.n)
        self._levels = self._mix_levels  # profiling ratios while busy
        self._index = np.zeros(0)  # activity_index of ``_levels`` set from phase levels
        self._phase_in: tuple[np.ndarray, np.ndarray] | None = None  # what set them
        self._mix_index = float(activity_index(mix_levels(mix, 1), activity.power_weights)[0])
        # Dynamic state: idle steady state at ambient.
        self.busy, self.lost = np.zeros(self.n), np.zeros(self.n, dtype=bool)
        self._sampled = np.zeros(self.n)  # busy share over NVML's last utilisation sample
        self.capacity_factor = np.ones(self.n)
        self.power_w = self._idle.copy()
        self.temperature_c = self.ambient_c + self._r * self.power_w
        self._jitter = np.zeros(self.n)
        # One row per counter, so that fields() floors them all in one operation.
        self._counter_rows = np.zeros((len(ff.STATE), self.n))
        self._counters = {k: self._counter_rows[i] for i, k in enumerate(ff.STATE)}
        # Which GPUs have each field at all: NaN for the rest, whatever their state.
        # ENC_UTIL and VGPU_LICENSE_STATUS stay supported everywhere: DCGM reports 0 for
        # them on encoder-less chips (A100, H100) and on bare metal, as dcgm-exporter shows.
        self._support = {
            "DCGM_FI_DEV_MEMORY_TEMP": per_gpu("hbm") > 0,  # GDDR parts have no memory sensor
        }
        for name in DCGM_FIELDS:
            if "NVLINK" in name:
                self._support[name] = self._nvlink > 0
            elif "_RETIRED_" in name:  # page retirement: Volta and older
                self._support[name] = ~self._remap
            elif "REMAP" in name:  # row remapping: Ampere and later
                self._support[name] = self._remap
        self._events: list[tuple[int, float, int]] = []
        self._head = self._tdp - self._idle  # dynamic power range, W
        self._decay = Decay(self._tau)
        self._thermal = ThermalModel(
            self._slowdown, self._r, self._tau, self._idle, self._head, self._floor_frac
        )
        # What faults set: power limit (W), clock cap (share of boost), framebuffer held.
        self.power_limit_w, self.clock_cap = self._tdp.copy(), np.ones(self.n)
        self._held_share = np.zeros(self.n)
        self._partial = [name for name, ok in self._support.items() if not ok.all()]

    def step(
        self,
        dt: float,
        load: np.ndarray,
        working_set_bytes: np.ndarray | None = None,
        *,
        batch_fill: np.ndarray | float | None = None,
        prefill_share: np.ndarray | float | None = None,
        kv_cache_bytes: np.ndarray | float | None = None,
        sampled_busy: np.ndarray | float | None = None,
    ) -> None:
        """Advance every GPU by ``dt`` seconds at the given busy share, batch and phase.

        The keyword arguments take one value per GPU or one for all.

        Args:
            dt: Seconds to advance, >= 0.
            load: Busy share per GPU: the share of ``dt`` in which one or more kernels
                ran, 0 to 1 (NaN counts as 0).
            working_set_bytes: Framebuffer used beyond the resident model and the KV
                cache, per GPU; None: 0.
            batch_fill: Mean sequences in the batch while busy over the batch limit, 0
                to 1. It and ``prefill_share`` set the profiling levels while busy;
                both None: the mix's levels. None with a ``prefill_share``: 1.
            prefill_share: Share of busy time spent in prefill (compute-bound) rather
                than decode (memory-bound), 0 to 1; one-at-a-time compute-bound work
                such as diffusion is 1. None with a ``batch_fill``: the activity's
                typical share.
            kv_cache_bytes: KV cache in use (bytes); None: 0.
            sampled_busy: Busy share over NVML's last utilisation sample (1/6 to 1 s
                before the read), which GPU_UTIL reports; None: ``load``.

        Raises:
            ValueError: ``dt`` is negative or an array has the wrong shape.
        """
        if not dt >= 0.0:
            raise ValueError(f"dt must be >= 0 seconds, got {dt}")
        demanded = np.asarray(load, dtype=float)
        if demanded.shape != (self.n,):
            raise ValueError(f"load must have shape ({self.n},), got {demanded.shape}")
        alive = ~self.lost
        # With every GPU on the bus (nearly always) the masks below change nothing: a
        # value kept where alive is the value, and x * 1.0 is x, so they are skipped.
        all_alive = not np.logical_or.reduce(self.lost)
        busy = ff.clip01(ff.nan_to_zero(demanded, copy=False))
        if not all_alive:
            busy = np.where(alive, busy, 0.0)
        if batch_fill is None and prefill_share is None:
            self._levels, scale, self._phase_in = self._mix_levels, busy, None
        else:
            fill = self._per_gpu(1.0 if batch_fill is None else batch_fill, "batch_fill")
            share = self.activity.typical_prefill_share if prefill_share is None else prefill_share
            shares = self._per_gpu(share, "prefill_share")
            last = self._phase_in  # the levels depend on these alone (see ff.same_inputs)
            if last is None or not ff.same_inputs(last, (fill, shares)):
                self._levels = phase_levels(self.activity, fill, shares)
                self._index = activity_index(self._levels, self.activity.power_weights)
                self._phase_in = (fill, shares)
            index = self._index
            scale = busy * index / self._mix_index if self._mix_index > 0 else busy
        sampled = busy if sampled_busy is None else self._per_gpu(sampled_busy, "sampled_busy")
        self._sampled = (
            ff.clip01(sampled) if all_alive else np.where(alive, ff.clip01(sampled), 0.0)
        )
        jitter = self._rng.standard_normal(self.n)
        self._jitter = np.minimum(np.maximum(jitter, -3.0), 3.0)
        demand = self._intensity * scale * (1.0 + POWER_JITTER * self._jitter)
        head, limit = self._head, self.power_limit_w
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            # Power limit: the clock share where idle + head * demand * c**3 == limit
            # (the ratio is exactly 1 at TDP). Below TDP the clock may go under base.
            floor = np.where(limit < self._tdp, self._floor_frac, self._base_frac)
            c_lim = np.cbrt((limit - self._idle) / head / demand)
            c_lim = np.maximum(np.minimum(1.0, c_lim), floor)
            capped = (c_lim < 1.0) & (c_lim <= self.clock_cap)  # the power limit binds
            c_pow = np.minimum(c_lim, self.clock_cap)
            p_free = np.minimum(self._idle + head * demand * c_pow**3, limit)
            t_amb = self.ambient_c + self._extra_c
            t_eq_free = t_amb + self._r * p_free
            t0 = self.temperature_c
            t_end_free = t_eq_free + (t0 - t_eq_free) * self._decay(dt)
            hot = t_eq_free > self._slowdown
        c = self._counters
        live = None if all_alive else alive.astype(float)

        def alive_only(x: np.ndarray) -> np.ndarray:  # a lost GPU's counters stand still
            return x if live is None else x * live

        if hot.any():  # some GPU heads past its slowdown temperature: the thermal limit
            th = throttle(
                self._thermal, dt, demand, c_pow, limit, t_amb, t0, hot, t_eq_free, t_end_free
            )
            t_held, clock = th.held_s, th.clock
            self.temperature_c = np.where(th.throttled, th.end_c, t_end_free)
            self.power_w = np.where(th.throttled, th.power_w, p_free)
            c[ff.ENERGY] += alive_only((p_free * (dt - t_held) + th.power_w * t_held) * 1e3)  # mJ
            c[ff.POWER_V] += alive_only(np.where(capped, dt - t_held, 0.0) * _NS)
            c[ff.THERMAL_V] += alive_only(t_held * _NS)
        else:  # none throttles: what the general path computes with no time held
            self.temperature_c = t_end_free
            clock = c_pow
            self.power_w = p_free
            c[ff.ENERGY] += alive_only(p_free * dt * 1e3)  # mJ
            c[ff.POWER_V] += alive_only(np.where(capped, dt * _NS, 0.0))  # where(.., dt) * _NS
        self.busy = busy
        c[ff.IDLE_V] += alive_only(np.where(busy < IDLE_BUSY, dt * _NS, 0.0))
        self._add_correctable_errors(dt, alive)
        ws = 0.0 if working_set_bytes is None else working_set_bytes
        ws_arr = np.asarray(ws, dtype=float)
        self._working = ws_arr if ws_arr.shape == (self.n,) else np.broadcast_to(ws_arr, (self.n,))
        self._kv = self._per_gpu(
            0.0 if kv_cache_bytes is None else kv_cache_bytes, "kv_cache_bytes"
        )
        self.time_s += dt
        self._check_shutdown(alive)
        # A fresh array either way: faults write into it (a lost GPU's factor drops to 0).
        self.capacity_factor = clock.copy() if all_alive else np.where(self.lost, 0.0, clock)

    def _per_gpu(self, value: np.ndarray | float, name: str) -> np.ndarray:
        """``value`` as a new float array of one value per GPU, NaN as 0."""
        return ff.per_gpu(value, self.n, name)

    def _add_correctable_errors(self, dt: float, alive: np.ndarray) -> None:
        count = self._rng.poisson(SBE_RATE_PER_S * dt * self.n)
        if not count:  # nearly always; drawing no integers leaves the generator as it is
            return
        hits = self._rng.integers(0, self.n, count)
        for key in ff.SBE:
            np.add.at(self._counters[key], hits[alive[hits]], 1.0)

    def _check_shutdown(self, was_alive: np.ndarray) -> None:
        for i in np.flatnonzero(was_alive & (self.temperature_c >= self._shutdown)):
            logger.warning("GPU %d passed its shutdown temperature and fell off the bus", i)
            self.inject_xid(int(i), XID_FELL_OFF_BUS, self.time_s)

    def fields(self, names: Collection[str] | None = None) -> dict[str, np.ndarray]:
        """Every DCGM field this fleet reports, one value per GPU.

        Args:
            names: Compute at least these fields (and skip groups of fields none of
                which is named); None: every field.

        Returns:
            DCGM field name to a float array of length ``n``, in the catalogue's units
            (``%``, ratios 0 to 1, MiB, W, mJ, C, MHz, ns, KB/s, MB/s, B/s). NaN where the
            GPU cannot report the field: a lost GPU, or a field its model lacks.
        """
        b, m, lv = self.busy, self.mix, self._levels
        want = None if names is None else frozenset(names)

        def need(*group: str) -> bool:
            return want is None or not want.isdisjoint(group)

        wiggle = 1.0 + POWER_JITTER * self._jitter
        out: dict[str, np.ndarray] = {}
        if need(*ff.STATE):
            floored = np.floor(self._counter_rows)
            out |= {k: floored[i] for i, k in enumerate(ff.STATE)}
        if need(*RATIO_FIELDS, ff.MEMORY_TEMP, ff.MEM_COPY):
            ratios = ratio_rows(b, lv, m, wiggle)  # averaged over the step, idle included
            dram = ratios[RATIO_FIELDS.index("DCGM_FI_PROF_DRAM_ACTIVE")]
            out |= dict(zip(RATIO_FIELDS, ratios, strict=True))
            out[ff.MEMORY_TEMP] = np.rint(self.temperature_c + 3.0 + 10.0 * dram)
            out[ff.MEM_COPY] = np.rint(100.0 * dram)
        if need(f"{ff.P}SM_CLOCK"):
            boost = np.rint(self.capacity_factor * self._max_mhz)
            out[f"{ff.P}SM_CLOCK"] = np.where(b < IDLE_BUSY, self._idle_mhz, boost)
        if need(*ff.FB):
            kv = np.maximum(self._kv, self._kv_pool)
            used_b = np.clip(self._resident + self._working + kv, 0.0, None)
            usable = self._total_mib - self._reserved_mib
            used = np.minimum(np.rint(used_b / MIB), usable)
            used = np.maximum(used, np.floor(self._held_share * usable))
            out |= {
                f"{ff.P}FB_TOTAL": self._total_mib.copy(),
                f"{ff.P}FB_FREE": self._total_mib - self._reserved_mib - used,
                f"{ff.P}FB_USED": used,
                f"{ff.P}FB_RESERVED": self._reserved_mib.copy(),
            }
        if need(*ff.PCIE):
            rx = self._pcie * (m.pcie_idle_share + m.pcie_rx_share * b) * wiggle
            tx = self._pcie * (m.pcie_idle_share + m.pcie_tx_share * b) * wiggle
            out |= {
                f"{ff.P}PCIE_TX_THROUGHPUT": np.rint(tx / 1024.0),  # KB/s, as NVML samples it
                f"{ff.P}PCIE_RX_THROUGHPUT": np.rint(rx / 1024.0),
                "DCGM_FI_PROF_PCIE_TX_BYTES": tx,
                "DCGM_FI_PROF_PCIE_RX_BYTES": rx,
            }
        if need(*ff.NVLINK):
            nvl = self._nvlink * m.nvlink_share * b * wiggle
            out |= {
                f"{ff.P}NVLINK_BANDWIDTH_TOTAL": np.rint(2.0 * nvl / 1e6),  # MB/s, tx + rx
                "DCGM_FI_PROF_NVLINK_TX_BYTES": nvl,
                "DCGM_FI_PROF_NVLINK_RX_BYTES": nvl.copy(),
            }
        simple: dict[str, Callable[[], np.ndarray]] = {
            f"{ff.P}MEM_CLOCK": lambda: self._mem_mhz.copy(),
            f"{ff.P}GPU_TEMP": lambda: np.rint(self.temperature_c),
            f"{ff.P}POWER_USAGE": lambda: np.round(self.power_w, 3),
            f"{ff.P}GPU_UTIL": lambda: np.rint(100.0 * self._sampled),
            f"{ff.P}ENC_UTIL": lambda: np.zeros(self.n),
            f"{ff.P}DEC_UTIL": lambda: np.zeros(self.n),
            f"{ff.P}VGPU_LICENSE_STATUS": lambda: np.zeros(self.n),
        }
        out |= {k: f() for k, f in simple.items() if need(k)}
        if want is None:  # every field, in the catalogue order callers have always seen
            ordered = {k: out[k] for k in ff.ORDER if k in out}
            out = ordered | out
        lost = bool(self.lost.any())  # a healthy fleet masks only the fields a model lacks
        for name in out if lost else [n for n in self._partial if n in out]:
            mask = self._support.get(name)
            out[name][self.lost if mask is None else self.lost | ~mask] = np.nan
        return out

    def _check_index(self, i: int) -> None:
        if not 0 <= i < self.n:
            raise ValueError(f"GPU index {i} is out of range 0..{self.n - 1}")

    def inject_xid(self, i: int, xid: int, at: float) -> None:
        """Report XID ``xid`` on GPU ``i`` at time ``at``; XID 79 takes the GPU off the bus."""
        self._check_index(i)
        self._counters[ff.XID][i] = xid
        self._events.append((i, float(at), int(xid)))
        if xid == XID_FELL_OFF_BUS:
            self.lost[i] = True
            self.busy[i] = self._sampled[i] = 0.0
            self.capacity_factor[i] = 0.0

    def inject_ecc_dbe(self, i: int, at: float) -> None:
        """A double-bit ECC error on GPU ``i``: counters, a remapped row or retired page, XID 48."""
        self._check_index(i)
        c = self._counters
        for key in ff.DBE:
            c[key][i] += 1
        c[f"{ff.P}UNCORRECTABLE_REMAPPED_ROWS" if self._remap[i] else f"{ff.P}RETIRED_DBE"][i] += 1
        self.inject_xid(i, XID_DBE, at)

    def inject_thermal(self, i: int, extra_c: float = 20.0) -> None:
        """Cooling failure on GPU ``i``: equilibrium ``ambient + R * P + extra_c``.

        It throttles once that passes slowdown: with 20 C, only when heavily loaded.
        """
        self._check_index(i)
        self._extra_c[i] = extra_c

    def clear_thermal(self, i: int) -> None:
        """Cooling restored on GPU ``i``."""
        self._check_index(i)
        self._extra_c[i] = 0.0

    def set_power_limit(self, i: int, watts: float | None) -> None:
        """Lower GPU ``i``'s power limit to ``watts`` (None: back to its TDP).

        As ``nvidia-smi -pl`` or a power brake does: power is held at the limit,
        the clock falls (under base if need be) and POWER_VIOLATION counts the time.
        """
        self._check_index(i)
        self.power_limit_w[i] = self._tdp[i] if watts is None else watts

    def set_clock_cap(self, i: int, share: float) -> None:
        """Hold GPU ``i``'s SM clock at or below ``share`` of boost (1: no cap)."""
        self._check_index(i)
        self.clock_cap[i] = share

    def set_memory_held(self, i: int, share: float) -> None:
        """Make GPU ``i``'s FB_USED at least ``share`` of its usable framebuffer (0: none)."""
        self._check_index(i)
        self._held_share[i] = share

    def inject_row_remap_failure(self, i: int, at: float) -> None:
        """Row remapping failed on GPU ``i``: ROW_REMAP_FAILURE=1 and XID 64."""
        self._check_index(i)
        self._counters[ff.REMAP_FAILURE][i] = 1.0
        self.inject_xid(i, XID_ROW_REMAP_FAILURE, at)

    def drain_xid_events(self) -> list[tuple[int, float, int]]:
        """XID events since the last drain.

        Returns:
            ``(gpu index, timestamp in seconds on this fleet's clock, xid)`` tuples, oldest first.
        """
        events, self._events = self._events, []
        return events
