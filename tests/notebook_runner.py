"""Executes the notebooks in `notebooks/` with a real Jupyter kernel, as CI and a maintainer do.

`tests/test_notebooks.py` runs them through this module; to refresh the outputs
that are committed with them, run from the repository root (the one command
that regenerates every notebook's outputs, with this checkout's package):

    python tests/notebook_runner.py                                   # all notebooks
    TF_CPP_MIN_LOG_LEVEL=3 python tests/notebook_runner.py notebooks/01_quickstart.ipynb

Each notebook runs top to bottom in a fresh `python3` kernel (the `ipykernel`
of the Python running this), with the notebook's folder as working directory.
Two things keep the saved outputs to what a reader would see in Jupyter:

* The kernel is started with `--IPKernelApp.capture_fd_output=False`, so
  TensorFlow's C++ start-up lines (written to file descriptor 2 before any
  Python logging, and different on every machine) go to this process's stderr
  instead of into the first cell.
* `tidy()` merges consecutive outputs of the same stream and applies `\\b` and
  `\\r` as a Jupyter front end does when it shows them, so Keras's progress bar
  is saved as its last state and not as every redraw. The order of stdout and
  stderr outputs is kept.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import nbformat
from nbclient import NotebookClient

NOTEBOOKS_DIR = Path(__file__).resolve().parent.parent / "notebooks"
KERNEL_NAME = "python3"
CELL_TIMEOUT_S = 300

_BACKSPACE = re.compile(r"[^\n\x08]\x08")
_OVERWRITTEN = re.compile(r"^.*\r(?=[^\n])", re.MULTILINE)


def notebook_paths() -> list[Path]:
    """Returns the notebooks of `notebooks/`, in order."""
    return sorted(NOTEBOOKS_DIR.glob("*.ipynb"))


def _as_shown(text: str) -> str:
    """Returns `text` as a terminal or Jupyter shows it: `\\b` and `\\r` applied."""
    while True:
        shorter = _BACKSPACE.sub("", text)
        if shorter == text:
            break
        text = shorter
    text = text.replace("\b", "")
    text = re.sub(r"\r+\n", "\n", text)
    return _OVERWRITTEN.sub("", text)


def tidy(notebook: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """Merges consecutive same-stream outputs and applies `\\b`/`\\r`, in place.

    Args:
        notebook: An executed notebook.

    Returns:
        The same notebook.
    """
    for cell in notebook.cells:
        if cell.cell_type != "code":
            continue
        outputs: list[nbformat.NotebookNode] = []
        for output in cell.outputs:
            last = outputs[-1] if outputs else None
            if (
                output.output_type == "stream"
                and last is not None
                and last.output_type == "stream"
                and last.name == output.name
            ):
                last.text += output.text
            else:
                outputs.append(output)
        for output in outputs:
            if output.output_type == "stream":
                output.text = _as_shown(output.text)
        cell.outputs = [o for o in outputs if o.output_type != "stream" or o.text]
        cell.metadata.pop("execution", None)
    return notebook


def execute(path: Path, timeout: int = CELL_TIMEOUT_S) -> tuple[nbformat.NotebookNode, float]:
    """Runs the notebook at `path` top to bottom in a fresh kernel.

    Args:
        path: The `.ipynb` file. It is read, not written.
        timeout: Seconds allowed per cell. Defaults to `CELL_TIMEOUT_S`.

    Returns:
        The executed, tidied notebook and the wall time of the run in seconds,
        kernel start-up included.

    Raises:
        nbclient.exceptions.CellExecutionError: A cell raised; the message holds
            the cell's source and traceback.
    """
    notebook = nbformat.read(path, as_version=4)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    # The kernel imports this checkout's hooks2callbacks, whatever is installed.
    root = str(NOTEBOOKS_DIR.parent)
    if os.environ.get("PYTHONPATH", "").split(os.pathsep)[0] != root:
        os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p)
    client = NotebookClient(
        notebook,
        timeout=timeout,
        kernel_name=KERNEL_NAME,
        extra_arguments=["--IPKernelApp.capture_fd_output=False"],
        resources={"metadata": {"path": str(path.parent)}},
        record_timing=False,
    )
    started = time.perf_counter()
    client.execute()
    return tidy(notebook), time.perf_counter() - started


def main(argv: Sequence[str] | None = None) -> int:
    """Executes notebooks and writes them back with their outputs.

    Args:
        argv: Notebook paths; none means every notebook in `notebooks/`.

    Returns:
        The exit status, 0.
    """
    parser = argparse.ArgumentParser(description="Execute notebooks and save their outputs in place.")
    parser.add_argument("paths", nargs="*", type=Path, help="notebooks (default: all of notebooks/)")
    args = parser.parse_args(argv)
    for path in args.paths or notebook_paths():
        notebook, seconds = execute(path)
        nbformat.write(notebook, path)
        print(f"{path}: executed in {seconds:.1f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
