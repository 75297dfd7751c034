"""An in-process metric store with Prometheus' query semantics, for the simulator.

Policies read telemetry through ``MetricsSource``; in production that is
Prometheus, in the simulator it is this store. Matching Prometheus where it
matters keeps a policy's behaviour the same in both: an instant query returns the
latest sample at or before the evaluation time within the 5-minute lookback; a
series missing from a scrape gets a staleness marker and is absent from then on
(never a fresh 0, never its old value); a window averages the samples in
``(t - window, t]`` (``avg_over_time``); aggregations group by labels.

Storage is numpy, one matrix per metric family: a row per scrape, a column per
series, NaN where the series is absent. Rows older than the retention are
dropped, and columns absent for the whole retained window with them, so a run
with pods coming and going stays bounded. Rows not yet written are kept NaN, so
a scrape writes only its own columns.

A raw PromQL signal (``Signal.query``) is read as the signal from parts it
stands for where it has that shape (``metrics.rawquery``); the simulator refuses
any other at setup, naming the construct.
"""

import logging
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from gpuscale.metrics.rawquery import structured
from gpuscale.metrics.signal import LabelledValue, Signal

FloatArray = npt.NDArray[np.float64]

logger = logging.getLogger(__name__)

LOOKBACK_S = 300.0
"""Prometheus' default ``--query.lookback-delta``."""

LabelKey = tuple[tuple[str, str], ...]
GroupKey = tuple[LabelKey, tuple[str, ...], bool]
"""A grouping's cache key: the matchers, the ``by`` labels, whether series stay apart."""


def _key(labels: Mapping[str, str]) -> LabelKey:
    return tuple(sorted(labels.items()))


@dataclass(slots=True)
class _RowAggregates:
    """One aggregation of a grouping at each stored row, for range queries to gather.

    A row before the newest is never written again (a scrape only ever writes the
    newest row), so its aggregate, once computed, holds until the rows move
    (``_Family.moves``) or the grouping's columns change (the cache is dropped).
    """

    moves: int  # ``_Family.moves`` when computed
    agg: list[list[float]]  # per group, per row
    have: list[list[bool]]  # per group, per row: whether any series had a value


@dataclass(slots=True)
class _Grouping:
    version: int
    columns: np.ndarray  # matched columns, sorted by group
    starts: np.ndarray  # first position of each group in ``columns``
    labels: list[Mapping[str, str]]
    seen: int = 0  # columns examined so far (new ones are added incrementally)
    members: dict[LabelKey, list[int]] = field(default_factory=dict)
    by_label: dict[str, list[str | None]] = field(default_factory=dict)  # label -> per group
    rows: dict[str, _RowAggregates] = field(default_factory=dict)  # by aggregation


@dataclass(slots=True)
class _Family:
    times: FloatArray
    values: FloatArray  # rows x column capacity
    rows: int = 0
    labels: list[Mapping[str, str]] = field(default_factory=list)
    gids: list[int] = field(default_factory=list)  # store-wide series id of each column
    col_of: np.ndarray = field(default_factory=lambda: np.full(64, -1, dtype=np.intp))
    version: int = 0
    last_labels: object = None
    last_columns: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.intp))
    # ``last_columns`` as a slice when they are consecutive (assigning a slice is cheaper).
    last_span: slice | np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.intp))
    last_t: float = -math.inf  # time of the newest row (``times[rows - 1]``)
    groups: dict[GroupKey, _Grouping] = field(default_factory=dict)
    moves: int = 0  # times the rows moved to drop old ones (a row's index changed)


class MetricStore:
    """Append-only, numpy-backed series with Prometheus query semantics (a ``MetricsSource``).

    Args:
        retention_s: Keep samples this long behind the newest; older ones are dropped.
        lookback_s: How far back an instant query looks for a sample.
    """

    def __init__(self, retention_s: float = 3600.0, lookback_s: float = LOOKBACK_S) -> None:
        if retention_s <= 0:
            raise ValueError(f"retention_s must be positive, got {retention_s}")
        self.retention_s = float(retention_s)
        self.lookback_s = float(lookback_s)
        self._families: dict[str, _Family] = {}
        self._latest: float | None = None
        # Every label set ever seen gets a store-wide id; scrapes usually pass the same
        # mapping objects again, so ids are looked up by identity first.
        self._gid: dict[LabelKey, int] = {}
        self._gid_labels: list[Mapping[str, str]] = []
        self._id_cache: dict[int, tuple[Mapping[str, str], int]] = {}
        self._recent_gids: dict[int, tuple[Sequence[Mapping[str, str]], np.ndarray]] = {}
        # Each signal's grouping key, by its identity: a policy passes the same Signal
        # objects at every decision, and the key sorts its matchers.
        self._group_keys: dict[tuple[int, bool], tuple[Signal, GroupKey]] = {}

    # ----------------------------------------------------------------- writing
    def ingest(
        self, t: float, metric: str, labels: Sequence[Mapping[str, str]], values: np.ndarray
    ) -> None:
        """Record one scrape of one metric family.

        Series of the family not in ``labels`` get a staleness marker at ``t``, as
        Prometheus writes when a series disappears from a target.

        Args:
            t: Scrape time, seconds; not earlier than the family's previous scrape.
            metric: Series name.
            labels: One label set per series. Passing the same sequence object as the
                previous scrape of this family skips re-indexing (the fast path).
            values: One value per series; NaN means the series is absent this scrape.

        Raises:
            ValueError: Lengths differ or ``t`` goes back in time.
        """
        vals = np.asarray(values, dtype=float)
        if vals.shape != (len(labels),):
            raise ValueError(f"{metric}: {len(labels)} label sets but values of shape {vals.shape}")
        fam = self._families.get(metric)
        if fam is None:
            fam = _Family(np.zeros(64), np.full((64, max(8, len(labels))), np.nan))
            self._families[metric] = fam
        if t < fam.last_t:
            raise ValueError(f"{metric}: scrape at {t} is older than the previous one")
        if t != fam.last_t:  # first, since making room may move the columns
            self._append_row(fam, t)
        if labels is not fam.last_labels:
            self._columns(fam, labels)
        fam.values[fam.rows - 1, fam.last_span] = vals
        latest = self._latest
        self._latest = t if latest is None or t > latest else latest

    def _gids(self, labels: Sequence[Mapping[str, str]]) -> np.ndarray:
        """Store-wide series ids of a scrape's label sets, cached by object identity."""
        recent = self._recent_gids.get(id(labels))
        if recent is not None and recent[0] is labels:
            return recent[1]
        cache = self._id_cache
        if len(cache) > 200_000:
            cache.clear()
        out = np.empty(len(labels), dtype=np.intp)
        for i, lab in enumerate(labels):
            hit = cache.get(id(lab))
            if hit is None or hit[0] is not lab:
                key = _key(lab)
                gid = self._gid.get(key)
                if gid is None:
                    gid = self._gid[key] = len(self._gid_labels)
                    self._gid_labels.append(dict(lab))
                hit = cache[id(lab)] = (lab, gid)
            out[i] = hit[1]
        if len(self._recent_gids) > 16:
            self._recent_gids.clear()
        self._recent_gids[id(labels)] = (labels, out)
        return out

    def _columns(self, fam: _Family, labels: Sequence[Mapping[str, str]]) -> np.ndarray:
        if labels is fam.last_labels:
            return fam.last_columns
        gids = self._gids(labels)
        if gids.size and int(gids.max()) >= fam.col_of.size:
            grown = np.full(max(2 * fam.col_of.size, int(gids.max()) + 1), -1, dtype=np.intp)
            grown[: fam.col_of.size] = fam.col_of
            fam.col_of = grown
        cols: np.ndarray = fam.col_of[gids]
        for i in np.flatnonzero(cols < 0).tolist():
            gid = int(gids[i])
            col = len(fam.labels)
            fam.col_of[gid] = cols[i] = col
            fam.labels.append(self._gid_labels[gid])
            fam.gids.append(gid)
            fam.version += 1
            if col >= fam.values.shape[1]:
                grown_v = np.full((fam.values.shape[0], 2 * fam.values.shape[1]), np.nan)
                grown_v[:, : fam.values.shape[1]] = fam.values
                fam.values = grown_v
        fam.last_labels, fam.last_columns = labels, cols
        fam.last_span = cols
        if cols.size:
            first = int(cols[0])
            if np.array_equal(cols, np.arange(first, first + cols.size)):
                fam.last_span = slice(first, first + cols.size)
        return cols

    def _append_row(self, fam: _Family, t: float) -> None:
        """Start a row at ``t``; it is NaN already (rows past ``rows`` are kept NaN)."""
        if fam.rows == fam.times.size:
            self._make_room(fam, t)
        fam.times[fam.rows] = t
        fam.rows += 1
        fam.last_t = float(t)

    def _make_room(self, fam: _Family, t: float) -> None:
        keep = int(np.searchsorted(fam.times[: fam.rows], t - self.retention_s, side="left"))
        keep_rows = fam.rows - keep
        if keep_rows > fam.times.size // 2:  # mostly retained: grow instead
            fam.times = np.concatenate([fam.times, np.zeros(fam.times.size)])
            extra = np.full(fam.values.shape, np.nan)
            fam.values = np.concatenate([fam.values, extra], axis=0)
            return
        fam.moves += 1
        fam.times[:keep_rows] = fam.times[keep : fam.rows]
        fam.values[:keep_rows] = fam.values[keep : fam.rows]
        fam.values[keep_rows : fam.rows] = np.nan
        fam.rows = keep_rows
        self._compact(fam)

    def _compact(self, fam: _Family) -> None:
        """Forget series absent throughout the retained rows."""
        n = len(fam.labels)
        live = ~np.all(np.isnan(fam.values[: fam.rows, :n]), axis=0) if fam.rows else np.zeros(n)
        if live.all():
            return
        keep = np.flatnonzero(live)
        fam.values[:, : keep.size] = fam.values[:, keep]
        fam.values[:, keep.size :] = np.nan
        fam.labels = [fam.labels[i] for i in keep]
        fam.gids = [fam.gids[i] for i in keep]
        fam.col_of[:] = -1
        fam.col_of[np.asarray(fam.gids, dtype=np.intp)] = np.arange(keep.size)
        fam.version += 1
        fam.last_labels = None
        fam.groups.clear()

    # ----------------------------------------------------------------- reading
    def latest_time(self) -> float | None:
        """Time of the newest scrape of any family, seconds (None before the first)."""
        return self._latest

    def series_count(self, metric: str) -> int:
        """Series of a family currently held (present or recently absent)."""
        fam = self._families.get(metric)
        return 0 if fam is None else len(fam.labels)

    def samples(
        self, metric: str, start: float, end: float
    ) -> tuple[FloatArray, FloatArray, Sequence[Mapping[str, str]]]:
        """The raw rows of one family with ``start <= time <= end``, for PromQL evaluation.

        Returns:
            Scrape times (seconds), values (a row per scrape, a column per series,
            NaN where the series was absent: a staleness marker) and each column's
            labels. Read-only views; empty when the family is unknown.
        """
        fam = self._families.get(metric)
        if fam is None or fam.rows == 0:
            return np.zeros(0), np.zeros((0, 0)), []
        ts = fam.times[: fam.rows]
        lo = int(np.searchsorted(ts, start, side="left"))
        hi = int(np.searchsorted(ts, end, side="right"))
        return ts[lo:hi], fam.values[lo:hi, : len(fam.labels)], fam.labels

    def instant(self, signal: Signal, at: float) -> list[LabelledValue]:
        """Evaluate a signal at one time, as a Prometheus instant query would.

        Returns:
            One result per series (aggregation ``none``) or per group, each with one point.
        """
        return self._evaluate(structured(signal), np.array([float(at)]))

    def instant_by(self, signal: Signal, at: float, label: str) -> dict[str, float]:
        """``instant``'s values keyed by one label, without a result object per series.

        Per-pod signals are read at every decision for each pod; ``observe`` uses this
        where the source has it (only this store), with the same values as ``instant``.

        Returns:
            {value of ``label``: the result's value} for each result carrying ``label``
            (the last such result where several share a value), in result order; a new
            dict at each call.
        """
        signal = structured(signal)
        fam = self._families.get(signal.metric)
        if fam is None or fam.rows == 0:
            return {}
        grouping = self._grouping(fam, signal)
        if grouping.columns.size == 0:
            return {}
        keys = grouping.by_label.get(label)
        if keys is None:  # each group's value of the label, kept until the groups change
            keys = grouping.by_label[label] = [lab.get(label) for lab in grouping.labels]
        if (
            grouping.starts.size == grouping.columns.size
            and signal.aggregation != "count"
            and signal.window <= 0
            and not getattr(signal, "rate", False)
        ):
            # One series per group read at one time (a per-pod signal): each group's value
            # is its series' newest sample within the lookback, as ``_sample`` and
            # ``_reduce`` give it, read as one row of floats (NaN: absent).
            at = float(at)
            if at >= fam.last_t:  # the usual: asked after the newest scrape, which it reads
                r, newest = fam.rows - 1, fam.last_t
            else:
                r = int(fam.times[: fam.rows].searchsorted(at, side="right")) - 1
                newest = float(fam.times[r])
            if r < 0 or at - newest > self.lookback_s:
                return {}
            row: list[float] = fam.values[r].take(grouping.columns).tolist()
            total = sum(row)
            if total == total and None not in keys:  # no NaN (it would carry into the sum)
                return dict(zip(keys, row, strict=True))  # type: ignore[arg-type]
            return {key: v for key, v in zip(keys, row, strict=True) if v == v and key is not None}
        times = np.array([float(at)])
        matrix = self._sample(fam, grouping.columns, times, signal)
        agg, have = self._reduce(matrix, grouping, signal.aggregation)
        row_vals: list[float] = agg[0].tolist()
        row_have: list[bool] = have[0].tolist()
        return {
            key: v
            for key, v, h in zip(keys, row_vals, row_have, strict=True)
            if h and key is not None
        }

    def newest(self, signal: Signal, at: float) -> float | None:
        """Time of the newest sample among the signal's series that an instant query sees.

        Like ``max(timestamp(selector))`` in Prometheus: the window and aggregation of
        the signal are ignored; a stale or absent series contributes nothing.

        Returns:
            Seconds, or None when no matching series has a sample within the lookback.
        """
        signal = structured(signal)
        fam = self._families.get(signal.metric)
        if fam is None or fam.rows == 0:
            return None
        columns = self._grouping(fam, signal, series=True).columns
        if at >= fam.last_t:  # the usual: asked after the newest scrape, which it reads
            row, t = fam.rows - 1, fam.last_t
        else:
            row = int(fam.times[: fam.rows].searchsorted(float(at), side="right")) - 1
            t = float(fam.times[row])
        if columns.size == 0 or row < 0 or at - t > self.lookback_s:
            return None
        # Every series of a family is written at each of its scrapes (absent ones as NaN,
        # the staleness marker), so the newest row is the only one an instant query sees.
        return t if not np.isnan(fam.values[row].take(columns)).all() else None

    def newest_by(self, signal: Signal, at: float, label: str) -> dict[str, float]:
        """Time of the newest sample an instant query sees, per value of ``label``.

        Like ``max by (label) (timestamp(selector))``. Every series of a family is
        written at each scrape (an absent one as NaN, the staleness marker), so a
        visible series' newest sample is the family's newest row.

        Returns:
            {value of ``label``: seconds} for the series carrying ``label``.
        """
        signal = structured(signal)
        fam = self._families.get(signal.metric)
        if fam is None or fam.rows == 0:
            return {}
        columns = self._grouping(fam, signal, series=True).columns
        ts = fam.times[: fam.rows]
        row = int(ts.searchsorted(float(at), side="right")) - 1
        if columns.size == 0 or row < 0 or at - ts[row] > self.lookback_s:
            return {}
        t = float(ts[row])
        seen = ~np.isnan(fam.values[row, columns])
        out: dict[str, float] = {}
        for col, visible in zip(columns.tolist(), seen.tolist(), strict=True):
            key = fam.labels[col].get(label)
            if visible and key is not None:
                out[key] = t
        return out

    def range(self, signal: Signal, start: float, end: float, step: float) -> list[LabelledValue]:
        """Evaluate a signal at ``start, start + step, ...`` up to ``end``.

        Returns:
            One result per series or group, with a point at every time it had a value.
        """
        if step <= 0 or end < start:
            raise ValueError(f"bad range: start={start} end={end} step={step}")
        n = math.floor((end - start) / step + 1e-9) + 1
        return self._evaluate(structured(signal), start + step * np.arange(n, dtype=np.float64))

    def _evaluate(self, signal: Signal, times: FloatArray) -> list[LabelledValue]:
        fam = self._families.get(signal.metric)
        if fam is None or fam.rows == 0:
            return []
        grouping = self._grouping(fam, signal)
        if grouping.columns.size == 0:
            return []
        if times.size > 1 and signal.window <= 0 and not getattr(signal, "rate", False):
            return self._gathered(fam, grouping, times, signal.aggregation)
        matrix = self._sample(fam, grouping.columns, times, signal)
        return self._aggregate(matrix, times, grouping, signal.aggregation)

    def _gathered(
        self, fam: _Family, grouping: _Grouping, times: FloatArray, aggregation: str
    ) -> list[LabelledValue]:
        """A range of a signal read at one row per time: each row's aggregate, gathered.

        A policy reads the same range again at each decision, one scrape later, so all
        but its newest rows were aggregated before (``_RowAggregates``); each row's
        aggregate is the one ``_sample`` and ``_reduce`` give it among the others (a
        row's reduction reads that row alone), so the answer is the same.
        """
        ts = fam.times[: fam.rows]
        rows: list[int] = (ts.searchsorted(times, side="right") - 1).tolist()
        last = max(rows[-1], 0)  # times ascend, so rows do
        cached = grouping.rows.get(aggregation)
        if cached is None or cached.moves != fam.moves:
            groups = len(grouping.labels)
            cached = _RowAggregates(
                fam.moves, [[] for _ in range(groups)], [[] for _ in range(groups)]
            )
            grouping.rows[aggregation] = cached
        done = len(cached.agg[0])
        agg, have = cached.agg, cached.have
        if done <= last:  # rows not aggregated yet: the newest, or all after a change
            block = fam.values[done : last + 1].take(grouping.columns, axis=1)
            new_agg, new_have = self._reduce(block, grouping, aggregation)
            more_agg: list[list[float]] = new_agg.T.tolist()
            more_have: list[list[bool]] = new_have.T.tolist()
            keep = fam.rows - 1 - done  # the newest row may yet be written: never kept
            for column, added in zip(agg, more_agg, strict=True):
                column.extend(added[:keep])
            for flags, seen_now in zip(have, more_have, strict=True):
                flags.extend(seen_now[:keep])
            agg = [a + m[keep:] for a, m in zip(agg, more_agg, strict=True)]
            have = [h + m[keep:] for h, m in zip(have, more_have, strict=True)]
        time_list: list[float] = times.tolist()
        lo = max(rows[0], 0)
        at: list[float] = ts[lo : last + 1].tolist()  # the rows read, from ``lo``
        lookback = self.lookback_s
        seen = [
            (t, r)
            for t, r in zip(time_list, rows, strict=True)
            if r >= 0 and t - at[r - lo] <= lookback
        ]
        results = []
        for labels, values, present in zip(grouping.labels, agg, have, strict=True):
            points = tuple((t, values[r]) for t, r in seen if present[r])
            if points:
                results.append(LabelledValue(labels, points))
        return results

    def _group_key(self, signal: Signal, series: bool) -> GroupKey:
        """``signal``'s grouping key (``series``: its series apart, whatever it aggregates)."""
        hit = self._group_keys.get((id(signal), series))
        if hit is not None and hit[0] is signal:
            return hit[1]
        if len(self._group_keys) > 4096:  # signals built per query: keep the cache bounded
            self._group_keys.clear()
        if series:
            key: GroupKey = (_key(signal.matchers), (), True)
        else:
            key = (_key(signal.matchers), tuple(signal.by), signal.aggregation == "none")
        self._group_keys[id(signal), series] = (signal, key)
        return key

    def _grouping(self, fam: _Family, signal: Signal, *, series: bool = False) -> _Grouping:
        """The family's columns the signal matches, in groups; cached per family version.

        ``series``: as ``Signal(signal.metric, signal.matchers)`` (every series apart), the
        grouping ``newest`` reads.
        """
        cache_key = self._group_key(signal, series)
        grouping = fam.groups.get(cache_key)
        if grouping is not None and grouping.version == fam.version:
            return grouping
        matchers_key, by, keep_apart = cache_key
        if grouping is None:  # compaction clears the cache, so columns only ever append here
            grouping = _Grouping(-1, np.zeros(0, dtype=np.intp), np.zeros(0, dtype=np.intp), [])
            fam.groups[cache_key] = grouping
        members = grouping.members
        for col in range(grouping.seen, len(fam.labels)):
            lab = fam.labels[col]
            if all(lab.get(k, "") == v for k, v in matchers_key):
                gkey = _key(lab) if keep_apart else tuple((k, lab.get(k, "")) for k in by)
                members.setdefault(gkey, []).append(col)
        grouping.seen = len(fam.labels)
        ordered = sorted(members.items())
        grouping.columns = np.array([c for _, cols in ordered for c in cols], dtype=np.intp)
        sizes = np.array([len(cols) for _, cols in ordered], dtype=np.intp)
        grouping.starts = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.intp)
        if keep_apart:
            grouping.labels = [fam.labels[cols[0]] for _, cols in ordered]
        else:
            grouping.labels = [{k: v for k, v in gkey if v != ""} for gkey, _ in ordered]
        grouping.by_label = {}
        grouping.rows = {}
        grouping.version = fam.version
        return grouping

    def _sample(
        self, fam: _Family, columns: np.ndarray, times: FloatArray, signal: Signal
    ) -> FloatArray:
        """Per evaluation time and column: the value the query sees (NaN when absent)."""
        ts = fam.times[: fam.rows]
        if signal.window <= 0 and not getattr(signal, "rate", False):
            if times.size == 1:  # an instant query: one row, read as scalars
                at = float(times[0])
                r = int(ts.searchsorted(at, side="right")) - 1
                if r >= 0 and at - float(ts[r]) <= self.lookback_s:
                    return np.asarray(fam.values[r, columns][None, :], dtype=float)
                return np.full((1, columns.size), np.nan)
            row = ts.searchsorted(times, side="right") - 1
            at_row = np.maximum(row, 0)
            ok = (row >= 0) & (times - ts[at_row] <= self.lookback_s)
            first, last = int(at_row[0]), int(at_row[-1])
            out: FloatArray
            # Rows never fall as times rise: n of them spanning n, none repeated, are a run.
            if last - first == at_row.size - 1 and (at_row[1:] != at_row[:-1]).all():
                # One row per time, in a run (the usual range): the same values, as the
                # same C-ordered array, as indexing rows and columns at once, at a
                # fraction of its cost.
                out = fam.values[first : last + 1].take(columns, axis=1)
            else:
                out = fam.values[at_row[:, None], columns]  # only the columns read
            if not ok.all():
                out[~ok] = np.nan
            return out
        window = max(float(signal.window), 1e-9)
        hi = np.searchsorted(ts, times, side="right")
        lo = np.searchsorted(ts, times - window, side="right")
        first, last = int(np.min(lo)), int(np.max(hi))
        block = fam.values[first:last][:, columns]
        if getattr(signal, "rate", False):
            return self._rate(block, ts[first:last], lo - first, hi - first)
        present = ~np.isnan(block)
        zero = np.zeros((1, block.shape[1]))
        csum = np.concatenate([zero, np.cumsum(np.where(present, block, 0.0), axis=0)])
        ccnt = np.concatenate([zero, np.cumsum(present, axis=0)])
        total = csum[hi - first] - csum[lo - first]
        count = ccnt[hi - first] - ccnt[lo - first]
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.asarray(np.where(count > 0, total / count, np.nan), dtype=float)

    @staticmethod
    def _rate(block: FloatArray, ts: FloatArray, lo: np.ndarray, hi: np.ndarray) -> FloatArray:
        """Per-second increase of counters over each window, with counter resets handled.

        Unlike Prometheus' ``rate`` this does not extrapolate to the window edges: it is
        the increase between the first and last samples in the window over their spacing.
        """
        present = ~np.isnan(block)
        both = present[1:] & present[:-1]
        step = np.diff(np.where(present, block, 0.0), axis=0)
        inc = np.where(both, np.where(step >= 0, step, block[1:]), 0.0)
        cum = np.concatenate([np.zeros((1, block.shape[1])), np.cumsum(inc, axis=0)])
        out = np.full((lo.size, block.shape[1]), np.nan)
        cols = np.arange(block.shape[1])
        for i, (a, b) in enumerate(zip(lo.tolist(), hi.tolist(), strict=True)):
            sub = present[a:b]
            if sub.shape[0] < 2:
                continue
            first = a + np.argmax(sub, axis=0)
            last = b - 1 - np.argmax(sub[::-1], axis=0)
            ok = (sub.sum(axis=0) >= 2) & (ts[last] > ts[first])
            with np.errstate(invalid="ignore", divide="ignore"):
                rate = (cum[last, cols] - cum[first, cols]) / (ts[last] - ts[first])
            out[i] = np.where(ok, rate, np.nan)
        return out

    @staticmethod
    def _reduce(
        matrix: FloatArray, grouping: _Grouping, aggregation: str
    ) -> tuple[np.ndarray, np.ndarray]:
        """Per evaluation time and group: the aggregate, and whether any series had a value."""
        present = ~np.isnan(matrix)
        have: np.ndarray
        agg: np.ndarray
        if aggregation == "none":
            agg = matrix[:, grouping.starts]
            have = present[:, grouping.starts]
        elif grouping.starts.size == matrix.shape[1] and aggregation != "count":
            # One series per group (``by`` the pod): each aggregate is that series' value.
            agg, have = matrix, present
        else:
            zeroed = np.where(present, matrix, 0.0)
            count = np.add.reduceat(present, grouping.starts, axis=1).astype(float)
            have = count > 0
            if aggregation == "sum":
                agg = np.add.reduceat(zeroed, grouping.starts, axis=1)
            elif aggregation == "avg":
                with np.errstate(invalid="ignore", divide="ignore"):
                    agg = np.add.reduceat(zeroed, grouping.starts, axis=1) / count
            elif aggregation == "max":
                agg = np.fmax.reduceat(matrix, grouping.starts, axis=1)
            elif aggregation == "min":
                agg = np.fmin.reduceat(matrix, grouping.starts, axis=1)
            elif aggregation == "count":
                agg = count
            else:
                raise ValueError(f"unknown aggregation {aggregation!r}")
        return agg, have

    @classmethod
    def _aggregate(
        cls, matrix: FloatArray, times: FloatArray, grouping: _Grouping, aggregation: str
    ) -> list[LabelledValue]:
        agg, have = cls._reduce(matrix, grouping, aggregation)
        time_list = times.tolist()
        if len(time_list) == 1:  # instant query: one point per result
            t0 = time_list[0]
            row_vals: list[float] = agg[0].tolist()
            row_have: list[bool] = have[0].tolist()
            return [
                LabelledValue(lab, ((t0, v),))
                for lab, v, h in zip(grouping.labels, row_vals, row_have, strict=True)
                if h
            ]
        any_have: list[bool] = np.asarray(have.any(axis=0)).tolist()
        all_have: list[bool] = np.asarray(have.all(axis=0)).tolist()
        vals_t: list[list[float]] = agg.T.tolist()
        have_t: list[list[bool]] = have.T.tolist()
        results = []
        for g, labels in enumerate(grouping.labels):
            if not any_have[g]:
                continue
            vals, hv = vals_t[g], have_t[g]
            if all_have[g]:  # the usual range: a value at every time, paired as they are
                points = tuple(zip(time_list, vals, strict=True))
            else:
                points = tuple((tt, v) for tt, v, h in zip(time_list, vals, hv, strict=True) if h)
            results.append(LabelledValue(labels, points))
        return results
