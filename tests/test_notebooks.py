"""The notebooks in `notebooks/`: each runs top to bottom in a real Jupyter kernel, and is committed executed.

Execution goes through `notebook_runner`, the same code that writes the
committed outputs (`python tests/notebook_runner.py`).
"""

from __future__ import annotations

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
    """The notebooks' logger settings: hook lines on stderr, never inside Keras's stdout output."""
    streams = [o for c in _code_cells(notebook) for o in c.outputs if o.output_type == "stream"]
    assert any("INFO:tensorflow:" in o.text for o in streams if o.name == "stderr"), f"{name}: no hook lines"
    glued = [o.text for o in streams if o.name == "stdout" and "INFO:tensorflow:" in o.text]
    assert not glued, f"{name}: hook lines in Keras's stdout output: {glued[0][:300]!r}"


def test_there_are_five_notebooks() -> None:
    assert [p.name for p in NOTEBOOKS] == [
        "01_quickstart.ipynb",
        "02_migrating_an_estimator_script.ipynb",
        "03_tensorboard_from_hooks.ipynb",
        "04_warm_start_from_a_tf1_checkpoint.ipynb",
        "05_continue_an_estimator_run.ipynb",
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
