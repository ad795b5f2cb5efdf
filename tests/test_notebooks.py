"""The notebooks in `notebooks/`: each runs top to bottom in a real Jupyter kernel, and is committed executed.

Execution goes through `notebook_runner`, the same code that writes the
committed outputs (`python tests/notebook_runner.py`).
"""

from __future__ import annotations

import math
import os
import re
import tempfile
from pathlib import Path
from typing import Any

import nbformat
import pytest
from notebook_runner import execute, notebook_paths

# The budget is 2 minutes per notebook on 2 CPU cores; CI machines are
# shared, so the test allows some slack over it and reports the time.
TIME_LIMIT_S = 240
NOTEBOOKS = notebook_paths()


def _shape(cell: Any) -> tuple[Any, ...]:
    """What a code cell shows, without the values: rich outputs' MIME types, and which streams."""
    rich = tuple((o.output_type, tuple(sorted(o.get("data", {})))) for o in cell.outputs if o.output_type != "stream")
    streams = tuple(sorted({o.name for o in cell.outputs if o.output_type == "stream"}))
    return rich, streams


def _code_cells(notebook: Any) -> list[Any]:
    return [c for c in notebook.cells if c.cell_type == "code" and c.source.strip()]


def _check_hook_lines_apart_from_the_bar(notebook: Any, name: str) -> None:
    """`notebook_logging()`: hook lines on stdout, each a line of its own that starts with its mode."""
    lines = [
        line
        for c in _code_cells(notebook)
        for o in c.outputs
        if o.output_type == "stream" and o.name == "stdout"
        for line in o.text.splitlines()
    ]
    # check_migration keeps the hooks' lines to compare them; a notebook that runs hooks itself shows them.
    if any("HookCallback(" in c.source for c in _code_cells(notebook)):
        assert any(line.startswith(_MODES) for line in lines), f"{name}: no hook lines"
    glued = [line for line in lines if any(mode in line[1:] for mode in _MODES)]
    assert not glued, f"{name}: a hook line continues another line: {glued[0][:300]!r}"
    stderr = [
        o.text for c in _code_cells(notebook) for o in c.outputs if o.output_type == "stream" and o.name == "stderr"
    ]
    assert not [text for text in stderr if "INFO:tensorflow:" in text], f"{name}: hook lines on stderr"


_MODES = ("[train] ", "[eval] ", "[predict] ")

# -- a fresh run's text outputs against the committed ones ---------------------------------

_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_BAR = re.compile(r"^\s*(\d+)/(\d+) .*(━|\[=|\.\.\.\.)")  # Keras 3's and tf_keras's progress bars
_TIMINGS = [
    (re.compile(r"\(\d+(\.\d+)? sec\)"), "(<t> sec)"),  # LoggingTensorHook's time since its last line
    (re.compile(r"\b\d+(\.\d+)?(ms|us|µs|s)(/step|/epoch)?\b"), "<t>"),  # Keras's bar: 3ms/step, 1s
    (re.compile(r"global_step/sec: [0-9.e+-]+"), "global_step/sec: <t>"),
    (re.compile(r"(executed|ran|took|in) \d+(\.\d+)? ?s\b"), r"\1 <t> s"),
]
_ADDRESS = re.compile(r"0x[0-9a-f]+")
_FLOAT = re.compile(r"-?\d+\.\d+(e[-+]?\d+)?|nan|inf")
# Two runs of the same seeded notebook agree to float32 rounding on one machine; across CPUs
# (oneDNN picks kernels by instruction set) the last digits may differ.
_REL, _ABS = 2e-3, 1e-4


def _normalise(text: str) -> str:
    """A text output without what differs between runs: timings, temporary paths, addresses, bar states.

    Keras's progress bar keeps only its final state of each epoch (k == N): the states drawn in
    between depend on the time each step took. So does whether the bar draws its final state at the
    last batch's end as well as when the pass ends (with a hook's `end()` line between the two), so
    a final state drawn again, with no other bar line between, counts once: the last.
    """
    text = _ANSI.sub("", text)
    # Installed packages (a venv inside or outside the checkout), then the checkout (CI clones
    # into a temporary folder), then other temporary paths.
    text = re.sub(r"[^\s'\",)]*/site-packages/", "<site-packages>/", text)
    text = text.replace(str(Path(__file__).resolve().parent.parent), "<repo>")
    for root in {tempfile.gettempdir(), os.path.realpath(tempfile.gettempdir())}:
        text = re.sub(re.escape(root) + r"/[^\s'\",)]*", "<tmp>", text)
    text = re.sub(r"(\.py):\d+:", r"\1:<n>:", text)
    text = _ADDRESS.sub("0x<a>", text)
    for pattern, replacement in _TIMINGS:
        text = pattern.sub(replacement, text)
    lines: list[str] = []
    last_bar: int | None = None  # where the last bar line kept is in `lines`
    for line in text.splitlines():
        bar = _BAR.match(line)
        if bar is not None and bar.group(1) != bar.group(2):
            continue
        line = line.rstrip()
        if bar is not None:
            if last_bar is not None and lines[last_bar] == line:
                del lines[last_bar]
            last_bar = len(lines)
        elif line.startswith("Epoch "):
            last_bar = None
        lines.append(line)
    return "\n".join(lines)


def _texts(cell: Any) -> list[tuple[str, str]]:
    """The cell's text outputs, in order: `(stream name or output type, normalised text)`."""
    texts = []
    for output in cell.outputs:
        if output.output_type == "stream":
            texts.append((output.name, _normalise(output.text)))
        elif "text/plain" in output.get("data", {}):
            texts.append((output.output_type, _normalise(output.data["text/plain"])))
    return texts


def _same_text(committed: str, fresh: str) -> bool:
    """Equal, but for floats within `_REL`/`_ABS` of each other."""
    if _FLOAT.sub("<f>", committed) != _FLOAT.sub("<f>", fresh):
        return False
    return all(
        a == b or math.isclose(float(a), float(b), rel_tol=_REL, abs_tol=_ABS)
        for a, b in zip(
            (m.group(0) for m in _FLOAT.finditer(committed)), (m.group(0) for m in _FLOAT.finditer(fresh)), strict=True
        )
    )


def _first_difference(committed: Any, fresh: Any) -> str | None:
    for index, (old, new) in enumerate(zip(_code_cells(committed), _code_cells(fresh), strict=True)):
        old_texts, new_texts = _texts(old), _texts(new)
        same = len(old_texts) == len(new_texts) and all(
            a[0] == b[0] and _same_text(a[1], b[1]) for a, b in zip(old_texts, new_texts, strict=True)
        )
        if not same:
            return f"code cell {index + 1}:\n--- committed\n{old_texts}\n+++ fresh run\n{new_texts}"
    return None


def test_there_are_seven_notebooks() -> None:
    assert [p.name for p in NOTEBOOKS] == [
        "01_quickstart.ipynb",
        "02_migrating_an_estimator_script.ipynb",
        "03_tensorboard_from_hooks.ipynb",
        "04_warm_start_from_a_tf1_checkpoint.ipynb",
        "05_continue_an_estimator_run.ipynb",
        "06_check_your_migration.ipynb",
        "07_hooks_in_a_custom_training_loop.ipynb",
    ]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_committed_with_outputs_and_plots(path: Path) -> None:
    notebook = nbformat.read(path, as_version=4)
    cells = _code_cells(notebook)
    assert [c.execution_count for c in cells] == list(range(1, len(cells) + 1)), (
        f"{path.name} is not saved executed top to bottom; run: python tests/notebook_runner.py {path}"
    )
    assert not [o for c in cells for o in c.outputs if o.output_type == "error"]
    assert any("image/png" in o.get("data", {}) for c in cells for o in c.outputs), f"{path.name} has no plot"
    _check_hook_lines_apart_from_the_bar(notebook, path.name)


@pytest.mark.slow
@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_runs_top_to_bottom_in_a_kernel_and_matches_what_is_committed(path: Path) -> None:
    committed = nbformat.read(path, as_version=4)
    executed, seconds = execute(path)  # raises CellExecutionError on any error
    print(f"{path.name}: {seconds:.1f} s")
    assert seconds < TIME_LIMIT_S, f"{path.name} took {seconds:.0f} s"
    _check_hook_lines_apart_from_the_bar(executed, path.name)
    # The committed outputs are those of the current source: same cells, same kinds of output.
    assert [c.source for c in _code_cells(executed)] == [c.source for c in _code_cells(committed)]
    assert [_shape(c) for c in _code_cells(executed)] == [_shape(c) for c in _code_cells(committed)], (
        f"{path.name}'s committed outputs differ from a fresh run; run: python tests/notebook_runner.py {path}"
    )
    # And they say what a fresh run says: same text, but for timings, temporary paths, the
    # progress bar's states between its final ones, and float digits (see _normalise).
    difference = _first_difference(committed, executed)
    assert difference is None, (
        f"{path.name}'s committed text outputs are not what a fresh run prints; regenerate all "
        f"notebooks with: python tests/notebook_runner.py\n{difference}"
    )


def test_normalising_keeps_values_and_drops_only_what_differs_between_runs() -> None:
    bar = "\x1b[1m 3/10\x1b[0m ━━━━ \x1b[1m0s\x1b[0m 5ms/step - loss: 1.0904"
    done = "10/10 ━━━━━━━━━━━━━━━━━━━━ 1s 17ms/step - loss: 1.2129 - val_loss: 1.1397"
    path = f"{tempfile.gettempdir()}/hooks2callbacks-02/model.ckpt-300"
    text = f"Epoch 1/2\n{bar}\n[train] loss = 1.25 (0.008 sec)\n{done}\n{path}"
    assert _normalise(text).splitlines() == [
        "Epoch 1/2",
        "[train] loss = 1.25 (<t> sec)",
        "10/10 ━━━━━━━━━━━━━━━━━━━━ <t> <t> - loss: 1.2129 - val_loss: 1.1397",
        "<tmp>",
    ]
    # The final state drawn at the last batch and again when the pass ends, a hook's end() line
    # between (a slow step drew it at the batch): as when it was drawn once, after the line.
    at_end = "[eval] loss = 1.14927 (0.017 sec)"
    assert _normalise(f"{done}\n{at_end}\n{done}") == _normalise(f"{at_end}\n{done}")
    # Two epochs that end on the same state are two lines.
    assert _normalise(f"Epoch 1/2\n{done}\nEpoch 2/2\n{done}").count("10/10") == 2
    assert _same_text("loss = 1.2129, accuracy = 0.9375", "loss = 1.2131, accuracy = 0.9375")
    assert not _same_text("loss = 0.929, accuracy = 1.0", "loss = 1.1493, accuracy = 1.0")  # issue 31's stale line
    assert not _same_text("loss = 1.2129", "val_loss = 1.2129")
