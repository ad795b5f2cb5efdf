"""Tests of the package's public names (`hooks2callbacks/__init__.py`)."""

from __future__ import annotations

import subprocess
import sys

import pytest

import hooks2callbacks


def test_every_public_name_resolves_to_the_object_its_module_defines():
    for name in hooks2callbacks.__all__:
        value = getattr(hooks2callbacks, name)
        assert getattr(sys.modules[hooks2callbacks._MODULES[name]], name) is value
    assert sorted(hooks2callbacks._MODULES) == sorted(hooks2callbacks.__all__)
    assert set(hooks2callbacks.__all__) <= set(dir(hooks2callbacks))


def test_an_unknown_name_is_an_attribute_error_naming_it():
    with pytest.raises(AttributeError, match="no attribute 'HookCallbacks'"):
        hooks2callbacks.HookCallbacks  # noqa: B018


def test_importing_the_package_does_not_import_tensorflow_until_a_name_is_used():
    script = (
        "import sys, hooks2callbacks; print('tensorflow' in sys.modules); "
        "hooks2callbacks.HookCallback; print('tensorflow' in sys.modules)"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["False", "True"]
