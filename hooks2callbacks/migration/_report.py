"""The report of `check_migration`: each `Difference`, and the `MigrationReport` that holds them."""

from __future__ import annotations

import dataclasses
import re
from typing import Any

import numpy as np


@dataclasses.dataclass(frozen=True)
class Difference:
    """One thing a hook saw or did differently under Keras than under TF1.

    Attributes:
        hook: The hook, as `"<index> <class>"` (its place in the factory's list),
            or `"(run)"` for the run itself (the step it stopped at, an error).
        method: The hook method (`"after_run"`), or `"files"`, `"run"`.
        step: The session run it happened in (0 for the first), or None for
            `begin`, `after_create_session` and the run itself.
        key: What differs: `"calls"`, `"returned"`, `"results['loss']"`,
            `"request_stop"`, `"log[0]"`, `"summary 'loss'"`,
            `"checkpoint model.ckpt-10"`, `"file <path>"`, `"stopped at"`, `"error"`.
        tf1: The TF1 side's value (`None` where it had none).
        keras: The Keras side's value.
        kind: What kind of difference: `"calls"`, `"value"`, `"type"`, `"dtype"`,
            `"shape"`, `"missing"` (on one side only), `"stop"`, `"error"`.
        hint: A known cause, where one fits, with its fix; else None.
        parted_at: The first step at which the sides parted on this hook and
            key (a checkpoint's or summary's step left out of the key), or None.
    """

    hook: str
    method: str
    step: int | None
    key: str
    tf1: Any
    keras: Any
    kind: str
    hint: str | None = None
    parted_at: int | None = None

    def __str__(self) -> str:
        where = f"{self.method}" + ("" if self.step is None else f" step {self.step}")
        text = f"{where} {self.key}: TF1 {_short(self.tf1)}, Keras {_short(self.keras)} ({self.kind}"
        size = _max_diff(self.tf1, self.keras)
        if size is not None:
            text += f", max |diff| {size[0]:.3g}" + (f" at index {size[1]}" if size[1] is not None else "")
        if self.parted_at is not None and self.parted_at != self.step:
            text += f", parted at step {self.parted_at}"
        return text + ")" + (f"\n      hint: {self.hint}" if self.hint else "")

    @property
    def max_diff(self) -> tuple[float, tuple[int, ...] | None] | None:
        """`(max |TF1 - Keras|, its index)` where both are numbers or arrays of one shape; else None."""
        return _max_diff(self.tf1, self.keras)


@dataclasses.dataclass
class MigrationReport:
    """What `check_migration` found; `print()` it for a table, `assert_ok()` it in a test.

    Attributes:
        mode: The mode checked.
        ok: True when every hook saw and did the same on both sides.
        differences: Every difference found, per hook in the order they happened.
        hooks: The hooks compared, as `"<index> <class>"`.
        compared: Per hook, how many items of each kind were compared (calls,
            values, log lines, summaries, checkpoints, files).
        steps: The session runs each side made: `{"tf1": n, "keras": m}`.
        not_compared: What was not compared, and why.
        notes: What else the check found (the restore's notes, a shuffled dataset).
        drift: The free-running differences that are float order, not the
            verdict: numbers within the drift tolerances, before the first step
            at which the per-step comparison (each step from TF1's weights of
            that step) parted.
        tf1_spread: Where TF1 ran in each of the orders it allowed (see
            `nondeterminism`), how far its own two runs parted, per hook and
            key: `{(hook, key): largest |diff|}`, the key without its step.
            Drift within it is within what TF1 itself gave.
        per_step_steps: The train steps compared from the same weights (0
            outside train mode, or with `per_step=False`).
        values: Each hook's numeric results step by step on each side:
            `{(hook, key): {"tf1": [(step, value), ...], "keras": [...]}}`
            (what `plot` draws).
        cause: A known precondition of the comparison that did not hold (the
            optimizer's state not restored from TF1's), with its fix (the
            proposed `assignment_map`, as code); said once. The differences
            it explains carry it as their hint. None when every precondition held.
        keras_error: The exception the Keras side raised (also an `error`
            difference), with its traceback; None when it ran through.
        nondeterminism: TF1's own nondeterminism: each place where a hook
            fetched a tensor that reads a variable the same run writes, with
            no edge ordering the two (the tensor, the variable, the write), and
            which of the orders TF1 allowed the Keras side matched. Never a
            difference: the Keras side passes where it matches one order at
            every step.
    """

    mode: str
    differences: list[Difference]
    hooks: list[str]
    compared: dict[str, dict[str, int]]
    steps: dict[str, int]
    not_compared: list[str]
    notes: list[str]
    keras_error: BaseException | None = None
    cause: str | None = None
    nondeterminism: list[str] = dataclasses.field(default_factory=list)
    drift: list[Difference] = dataclasses.field(default_factory=list)
    per_step_steps: int = 0
    tf1_spread: dict[tuple[str, str], float] = dataclasses.field(default_factory=dict)
    values: dict[tuple[str, str], dict[str, list[tuple[int, Any]]]] = dataclasses.field(
        default_factory=dict, repr=False
    )

    def plot(self, hook: str, key: str, ax: Any = None) -> Any:
        """Draws both sides' per-step values of one hook's result, and marks where they parted.

        Example: `report.plot("0 LoggingTensorHook", "results['loss']")`. An
        array's values are drawn by their mean |value| per step.

        Args:
            hook: The hook, as the report names it (`"0 LoggingTensorHook"`).
            key: The result, as the report names it (`"results['loss']"`).
            ax: A matplotlib `Axes` to draw on. Defaults to a new figure's.

        Returns:
            The `Axes` drawn on.

        Raises:
            ImportError: matplotlib is not installed.
            KeyError: The report holds no per-step values of that hook and key;
                the message lists those it holds.
        """
        try:
            import matplotlib.pyplot as plt  # pylint: disable=import-outside-toplevel
        except ImportError as error:
            raise ImportError(
                "MigrationReport.plot() draws with matplotlib, which is not installed: pip install matplotlib "
                "(the report's values are in report.values without it)."
            ) from error
        series = self.values.get((hook, key))
        if series is None:
            held = ", ".join(f"({h!r}, {k!r})" for h, k in sorted(self.values)) or "none"
            raise KeyError(f"MigrationReport.plot({hook!r}, {key!r}): no per-step values of that result; held: {held}")
        if ax is None:
            _, ax = plt.subplots()
        for side, style in (("tf1", "-"), ("keras", "--")):
            points = series[side]
            ax.plot(
                [s for s, _ in points],
                [float(np.mean(np.abs(v))) if np.ndim(v) else float(v) for _, v in points],
                style,
                marker="o",
                label="TF1" if side == "tf1" else "Keras",
            )
        parted = [d.step for d in self.differences if (d.hook, d.key) == (hook, key) and d.step is not None]
        drifted = [d.step for d in self.drift if (d.hook, d.key) == (hook, key) and d.step is not None]
        if parted:
            ax.axvline(min(parted), color="red", linestyle=":", label=f"parted (step {min(parted)})")
        elif drifted:
            ax.axvline(min(drifted), color="orange", linestyle=":", label=f"drift from step {min(drifted)}")
        ax.set_xlabel("step")
        ax.set_ylabel(key)
        ax.set_title(f"{hook} {key} ({self.mode})")
        ax.legend()
        return ax

    @property
    def ok(self) -> bool:
        return not self.differences

    def __str__(self) -> str:
        found = {d.hook for d in self.differences}
        head = (
            f"check_migration ({self.mode}): "
            + (
                # A cause limited the comparison: not a plain OK (the cause follows the header).
                ("OK as far as compared, see the cause below" if self.cause else "OK, every hook saw and did the same")
                if self.ok
                else f"{len(self.differences)} differences"
            )
            + f"; session runs: TF1 {self.steps.get('tf1')}, Keras {self.steps.get('keras')}"
        )
        kinds = ("calls", "values", "lines", "summaries", "checkpoints", "files")
        rows = [["hook", *kinds, "first difference"]]
        for hook in self.hooks:
            counts = self.compared.get(hook, {})
            first = next((d for d in self.differences if d.hook == hook), None)
            rows.append([hook, *(str(counts.get(k, 0)) for k in kinds), "-" if first is None else str(first)])
        for hook in sorted(found - set(self.hooks)):
            first = next(d for d in self.differences if d.hook == hook)
            rows.append([hook, *("" for _ in kinds), str(first)])
        widths = [max(len(r[i].split("\n")[0]) for r in rows) for i in range(len(kinds) + 1)]
        lines = [head, *(["", f"Cause: {self.cause}"] if self.cause else []), ""]
        for row in rows:
            cells = [c.ljust(w) for c, w in zip(row, widths, strict=False)]
            lines.append("  ".join([*cells, row[-1]]).rstrip())
        for title, items in (
            ("TF1's own nondeterminism:", self.nondeterminism),
            (
                "Drift (float order within the drift tolerances, each step equal from the same weights):",
                _drift_lines(self.drift, self.tf1_spread),
            ),
            ("Not compared:", self.not_compared),
            ("Notes:", self.notes),
        ):
            if items:
                lines += ["", title, *(f"  - {item}" for item in items)]
        return "\n".join(lines)

    def assert_ok(self) -> None:
        """Raises AssertionError with the report's table unless every hook saw and did the same.

        Raises:
            AssertionError: There is a difference.
        """
        if not self.ok:
            seen: set[str] = set()
            lines = []
            for d in self.differences[:20]:  # each hint once: later differences with the same one say so
                repeated = d.hint is not None and d.hint in seen
                seen.add(d.hint or "")
                shown_d = dataclasses.replace(d, hint="(as above)") if repeated else d
                lines.append(f"  {d.hook}: {shown_d}")
            shown = "\n".join(lines)
            more = f"\n  ... and {len(self.differences) - 20} more" if len(self.differences) > 20 else ""
            raise AssertionError(f"{self}\n\nAll differences:\n{shown}{more}") from self.keras_error


_SERIES = (re.compile(r"ckpt-\d+"), re.compile(r" @ -?\d+"))


def series_key(difference: Difference) -> tuple[str, str]:
    """A difference's hook and key with its step left out (a checkpoint's number, a summary's step)."""
    key = _SERIES[1].sub("", _SERIES[0].sub("ckpt-*", difference.key))
    return difference.hook, key


def _drift_lines(drift: list[Difference], spread: dict[tuple[str, str], float], most: int = 12) -> list[str]:
    """One line per hook and key: the first step it parted at, its largest difference, and TF1's own spread."""
    series: dict[tuple[str, str], list[Difference]] = {}
    for d in drift:
        series.setdefault(series_key(d), []).append(d)
    lines = []
    for (hook, key), found in series.items():
        sizes = [(d.max_diff or (0.0, None))[0] for d in found]
        largest = found[int(np.argmax(sizes))]
        size = f", max |diff| {max(sizes):.3g} at step {largest.step}" if max(sizes) > 0 else ""
        if (hook, key) in spread:
            size += f"; TF1 against TF1 (its two orders): max |diff| {spread[hook, key]:.3g}"
        lines.append(f"{hook} {key}: from step {min(d.step or 0 for d in found)}, {len(found)} step(s){size}")
    more = [f"... and {len(lines) - most} more (MigrationReport.drift)"] if len(lines) > most else []
    return lines[:most] + more


def _max_diff(a: Any, b: Any) -> tuple[float, tuple[int, ...] | None] | None:
    if isinstance(a, (str, bytes, bool, dict)) or isinstance(b, (str, bytes, bool, dict)) or a is None or b is None:
        return None
    try:
        x, y = np.asarray(a), np.asarray(b)
    except (TypeError, ValueError):
        return None
    if x.shape != y.shape or x.dtype.kind not in "fciu" or y.dtype.kind not in "fciu" or not x.size:
        return None
    diff = np.abs(x.astype(np.float64) - y.astype(np.float64))
    if np.isnan(diff).all():
        return None
    at = int(np.nanargmax(diff))
    index = tuple(int(i) for i in np.unravel_index(at, x.shape)) if x.ndim else None
    return float(diff.ravel()[at]), index


def _short(value: Any) -> str:
    if isinstance(value, np.ndarray) and value.size > 6:
        return f"array(shape={value.shape}, dtype={value.dtype}, first={value.ravel()[:3].tolist()}...)"
    text = repr(value)
    return text if len(text) <= 120 else text[:117] + "..."
