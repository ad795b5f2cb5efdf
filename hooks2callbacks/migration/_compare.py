"""The comparison: hook by hook, call by call, item by item, the TF1 side's record against the Keras side's."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np

from hooks2callbacks.migration._races import ORDERS
from hooks2callbacks.migration._record import _NUMBER, _Event, _Side, _Time, _untimed
from hooks2callbacks.migration._report import Difference, MigrationReport, series_key


class _Compare:
    def __init__(self, rtol: float, atol: float) -> None:
        self.rtol, self.atol = rtol, atol

    def value(self, a: Any, b: Any) -> str | None:
        """The kind of difference between two recorded values, or None when they are the same."""
        if isinstance(a, _Time) or isinstance(b, _Time):
            return None if type(a) is type(b) else "value"
        if type(a) is not type(b):
            return "type"
        if isinstance(a, dict):
            return None if a.keys() == b.keys() and all(self.value(a[k], b[k]) is None for k in a) else "value"
        if isinstance(a, (np.ndarray, np.generic)):
            if a.dtype != b.dtype:
                return "dtype"
            if np.shape(a) != np.shape(b):
                return "shape"
            if a.dtype.kind in "fc":
                return None if np.allclose(a, b, rtol=self.rtol, atol=self.atol, equal_nan=True) else "value"
            return None if np.array_equal(a, b) else "value"
        if isinstance(a, float):
            return None if math.isclose(a, b, rel_tol=self.rtol, abs_tol=self.atol) or a != a and b != b else "value"
        if isinstance(a, (int, str, bytes, bool, type(None))):
            return None if a == b else "value"
        return None if repr(a) == repr(b) else "value"

    def line(self, a: str, b: str) -> bool:
        """Whether two log lines say the same: text exactly, numbers within tolerance, times by presence."""
        a, b = _untimed(a), _untimed(b)
        if _NUMBER.sub("#", a) != _NUMBER.sub("#", b):
            return False
        for x, y in zip(_NUMBER.findall(a), _NUMBER.findall(b), strict=True):
            if x == y:
                continue
            if not any(c in x + y for c in ".eEn") or not math.isclose(
                float(x), float(y), rel_tol=max(self.rtol, 1e-6), abs_tol=self.atol
            ):
                return False
        return True


def _compare_hook(
    name: str, tf1: list[_Event], keras: list[_Event], compare: _Compare, counts: dict[str, int]
) -> list[Difference]:
    found: list[Difference] = []
    calls = [(e.method, e.step) for e in tf1], [(e.method, e.step) for e in keras]
    counts["calls"] = min(len(calls[0]), len(calls[1]))
    if calls[0] != calls[1]:
        at = next((i for i, (p, q) in enumerate(zip(*calls, strict=False)) if p != q), min(map(len, calls)))
        first = [c[at] if at < len(c) else None for c in calls]
        step = next((c[1] for c in first if c is not None), None)
        found.append(Difference(name, (first[0] or first[1] or ("?",))[0], step, "calls", first[0], first[1], "calls"))
    by_call = {}
    seen: dict[tuple[str, Any], int] = {}
    for event in keras:
        key = (event.method, event.step)
        seen[key] = seen.get(key, 0) + 1
        by_call[(key[0], key[1], seen[key])] = event
    seen = {}
    for event in tf1:
        key = (event.method, event.step)
        seen[key] = seen.get(key, 0) + 1
        other = by_call.get((key[0], key[1], seen[key]))
        if other is None:
            continue
        for items, kind_count in ((event.items, "values"), (event.summaries, "summaries")):
            theirs = other.items if items is event.items else other.summaries
            for item in sorted(set(items) | set(theirs)):
                counted = (
                    "checkpoints"
                    if item.startswith("checkpoint ")
                    else "files"
                    if item.startswith("file ")
                    else kind_count
                )
                counts[counted] = counts.get(counted, 0) + 1
                a, b = items.get(item), theirs.get(item)
                if item not in items or item not in theirs:
                    if item == "request_stop":
                        found.append(Difference(name, event.method, event.step, item, bool(a), bool(b), "stop"))
                    else:
                        found.append(
                            Difference(name, event.method, event.step, item, _present(a), _present(b), "missing")
                        )
                    continue
                if item.startswith("checkpoint "):
                    found += _compare_checkpoint(name, event, item, a or {}, b or {}, compare)
                    continue
                kind = compare.value(a, b)
                if kind is not None:
                    found.append(Difference(name, event.method, event.step, item, a, b, kind))
        counts["lines"] = counts.get("lines", 0) + max(len(event.lines), len(other.lines))
        for i in range(max(len(event.lines), len(other.lines))):
            a = event.lines[i] if i < len(event.lines) else None
            b = other.lines[i] if i < len(other.lines) else None
            if a is None or b is None or not compare.line(a, b):
                found.append(Difference(name, event.method, event.step, f"log[{i}]", a, b, "value"))
    return sorted(found, key=_when)


_ORDER = {"begin": 0, "after_create_session": 1, "before_run": 2, "after_run": 3, "end": 4}


def _when(difference: Difference) -> tuple[int, int]:
    """Orders a hook's differences as the calls happened (a sort is stable: the order of each call's items stays)."""
    step = difference.step if difference.step is not None else -1
    return (step + (1 if difference.method == "end" else 0), _ORDER.get(difference.method, 5))


def _present(value: Any) -> Any:
    if value is None:
        return None
    if isinstance(value, dict):
        return "written"
    return value


def _compare_checkpoint(
    name: str, event: _Event, item: str, a: dict[str, Any], b: dict[str, Any], compare: _Compare
) -> list[Difference]:
    found = []
    # Keras's optimizer keeps its rate as a variable; a TF1 graph whose rate was a constant had none.
    only_tf1, only_keras = sorted(set(a) - set(b)), sorted(set(b) - set(a) - {"learning_rate"})
    if only_tf1 or only_keras:
        found.append(Difference(name, event.method, event.step, f"{item} names", only_tf1, only_keras, "missing"))
    for variable in sorted(set(a) & set(b)):
        kind = compare.value(a[variable], b[variable])
        if kind is not None:
            found.append(
                Difference(name, event.method, event.step, f"{item} {variable}", a[variable], b[variable], kind)
            )
    return found


def _report(
    mode: str, tf1: _Side, keras: _Side, compare: _Compare, not_compared: list[str], notes: list[str]
) -> MigrationReport:
    differences: list[Difference] = []
    compared: dict[str, dict[str, int]] = {}
    if keras.error is not None:
        differences.append(
            Difference(
                "(run)", "run", keras.step, "error", None, f"{type(keras.error).__name__}: {keras.error}", "error"
            )
        )
    if [h.split(" ", 1)[1] for h in tf1.hooks] != [h.split(" ", 1)[1] for h in keras.hooks] and keras.hooks:
        differences.append(Difference("(run)", "hooks", None, "hooks", tf1.hooks, keras.hooks, "calls"))
    for i, hook in enumerate(tf1.hooks):
        counts: dict[str, int] = {}
        compared[hook] = counts
        theirs = keras.events[i] if i < len(keras.events) else []
        differences += _compare_hook(hook, tf1.events[i], theirs, compare, counts)
    if tf1.step != keras.step and keras.error is None:
        differences.append(Difference("(run)", "run", None, "stopped at", tf1.step, keras.step, "stop"))
    report = MigrationReport(
        mode,
        differences,
        list(tf1.hooks),
        compared,
        {"tf1": tf1.step, "keras": keras.step},
        not_compared,
        notes,
        keras.error,
    )
    report.values = _values(tf1, keras)
    return report


def _values(tf1: _Side, keras: _Side) -> dict[tuple[str, str], dict[str, list[tuple[int, Any]]]]:
    """Each hook's numeric results, step by step, on each side (what `MigrationReport.plot` draws)."""
    found: dict[tuple[str, str], dict[str, list[tuple[int, Any]]]] = {}
    for name, side in (("tf1", tf1), ("keras", keras)):
        for hook, events in zip(side.hooks, side.events, strict=False):
            for event in events:
                if event.method != "after_run" or event.step is None:
                    continue
                for key, value in event.items.items():
                    if key.startswith("results") and isinstance(value, (int, float, np.number, np.ndarray)):
                        if not isinstance(value, bool):
                            found.setdefault((hook, key), {"tf1": [], "keras": []})[name].append((event.step, value))
    return found


def _report_in_orders(
    mode: str, tf1_sides: list[_Side], keras: _Side, compare: _Compare, not_compared: list[str], notes: list[str]
) -> tuple[MigrationReport, int]:
    """The report against the TF1 run in each order TF1 allowed (`_races`): per hook, the order Keras matched.

    A hook whose fetch raced is compared with the TF1 run in each order, from
    its first step to its last, and judged by the one it matched (by the one
    with fewer differences where it matched neither): TF1 could have given
    either run, never a mix of the two within one hook's record as Keras saw it.

    Returns:
        The report, and the order of the train op's own races that the Keras side
        matched (or came nearer), an index of `ORDERS`; 0 where the train op did not race.
    """
    reports = [_report(mode, side, keras, compare, not_compared, notes) for side in tf1_sides]
    report = reports[0]
    races = tf1_sides[0].races
    if len(reports) == 1 or not races:
        return report, 0
    if any(name == "(run)" for name, _ in races):
        # The train op itself raced: the weights differ between the orders, so every hook, and
        # the run, are judged against one order, the one Keras matched (or came nearer).
        chosen = min(range(len(reports)), key=lambda i: len(reports[i].differences))
        report = reports[chosen]
        report.nondeterminism = [
            f"{race}; the Keras side "
            + (f"matched {ORDERS[chosen]!r} at every step" if report.ok else f"came nearer {ORDERS[chosen]!r}")
            for race in races.values()
        ]
        return report, chosen
    differences = [d for d in report.differences if d.hook not in report.hooks]
    compared: dict[str, dict[str, int]] = {}
    for hook in report.hooks:
        per_order = [[d for d in r.differences if d.hook == hook] for r in reports]
        chosen = min(range(len(reports)), key=lambda i: len(per_order[i]))
        compared[hook] = reports[chosen].compared.get(hook, {})
        racing = [race for (name, _), race in races.items() if name == hook]
        if racing:
            matched = (
                f"the Keras side matched {ORDERS[chosen]!r} at every step"
                if not per_order[chosen]
                else f"the Keras side matched neither order (compared with {ORDERS[chosen]!r}, the nearer)"
            )
            report.nondeterminism += [f"{race}; {matched}" for race in racing]
            racy_keys = {race.key for race in racing}
            per_order[chosen] = [
                dataclasses.replace(
                    d,
                    hint="TF1 read this value unordered with the run's write (TF1's own nondeterminism, listed "
                    "below): the Keras side gave neither the value read before the write nor the one read after "
                    "it, consistently.",
                )
                if d.key in racy_keys
                else d
                for d in per_order[chosen]
            ]
        differences += per_order[chosen]
    report.differences = differences
    report.compared = compared
    return report, 0


def tf1_spread(tf1_sides: list[_Side], mode: str) -> dict[tuple[str, str], float]:
    """How far TF1's own runs in its two orders part, per hook and key (`series_key`): the largest |diff|.

    Where TF1 left an order to its scheduler it ran twice, once in each order;
    what those two runs differ by is a spread TF1 itself had, the yardstick for
    a drift of the Keras side.
    """
    if len(tf1_sides) < 2:
        return {}
    exact = _Compare(0.0, 0.0)
    spread: dict[tuple[str, str], float] = {}
    for d in _report(mode, tf1_sides[0], tf1_sides[1], exact, [], []).differences:
        size = d.max_diff
        if size is not None:
            key = series_key(d)
            spread[key] = max(spread.get(key, 0.0), size[0])
    return spread


def with_first_steps(differences: list[Difference]) -> list[Difference]:
    """Each difference with the first step at which the sides parted on its hook and key."""
    first: dict[tuple[str, str], int] = {}
    for d in differences:
        if d.step is not None:
            key = series_key(d)
            first[key] = min(first.get(key, d.step), d.step)
    return [dataclasses.replace(d, parted_at=first.get(series_key(d))) for d in differences]


def split_drift(
    differences: list[Difference], parted_at: int | None, compare: _Compare
) -> tuple[list[Difference], list[Difference]]:
    """`(kept, drift)`: the free-running differences that are float order, and the others.

    A difference is drift where its values are numbers (or arrays, summaries, log
    lines of numbers) within the drift tolerances of `compare`, at a step before
    the first one at which the per-step comparison parted (`parted_at`; None: it
    never did). Without a per-step comparison (eval, predict) nothing is drift.
    """
    kept: list[Difference] = []
    drift: list[Difference] = []
    for d in differences:
        before = d.step is not None and (parted_at is None or d.step < parted_at)
        near = d.kind == "value" and (
            compare.line(d.tf1, d.keras)
            if isinstance(d.tf1, str) and isinstance(d.keras, str)
            else compare.value(d.tf1, d.keras) is None
        )
        if before and near and d.hook != "(run)":
            drift.append(dataclasses.replace(d, hint=None))  # no cause to name: float order
        else:
            kept.append(d)
    return kept, drift
