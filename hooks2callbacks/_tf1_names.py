"""TF1's names for a Keras model's variables and its optimizer's slots.

The rule (see `_model`'s docstring): the Keras path less the model's name as prefix, with the
characters TF refuses in op names made `_`; TF1's Adam, Adagrad and RMSProp named a variable's
slots `<variable>/<Optimizer>`, `<variable>/<Optimizer>_1`, and Momentum `<variable>/Momentum`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

# Characters TF refuses in op names, and what a name may start with.
_REFUSED = re.compile(r"[^A-Za-z0-9_.\-/>]")
_FIRST = re.compile(r"[A-Za-z0-9.]")


def tf1_name(variable: Any, model_prefix: str = "") -> str:
    """The TF1 op name of a Keras variable, by the rule in `_model`'s docstring."""
    path = getattr(variable, "path", None)
    if not isinstance(path, str):  # tf_keras, tf.Variable: "dense/kernel:0"
        path = re.sub(r":\d+$", "", str(getattr(variable, "name", "variable")))
    if model_prefix and path.startswith(model_prefix):
        path = path[len(model_prefix) :]
    path = _REFUSED.sub("_", path) or "variable"
    return path if _FIRST.match(path) else "v" + path


def unique(name: str, used: set[str]) -> str:
    candidate, count = name, 0
    while candidate in used:
        count += 1
        candidate = f"{name}_{count}"
    used.add(candidate)
    return candidate


def optimizer_variables(optimizer: Any) -> list[Any]:
    variables = getattr(optimizer, "variables", ())
    return list(variables() if callable(variables) else variables)


# TF1's slot names (`<variable>/<name>`), by Keras optimizer and slot kind (Keras 3's
# name, tf_keras's). SGD's momentum is left out: Keras keeps -lr * TF1's accumulator.
TF1_SLOTS: dict[str, dict[str, str]] = {
    "Adam": {"momentum": "Adam", "m": "Adam", "velocity": "Adam_1", "v": "Adam_1"},
    "Adagrad": {"accumulator": "Adagrad"},
    "RMSprop": {"velocity": "RMSProp", "average_gradient": "RMSProp_1", "momentum": "RMSProp_1"},
}


# TF1's MomentumOptimizer kept an accumulator of gradients, `<variable>/Momentum`; Keras's SGD
# keeps -lr times it. Checkpoints convert between the two, at the current (constant) rate.
TF1_MOMENTUM: dict[str, dict[str, str]] = {"SGD": {"momentum": "Momentum", "m": "Momentum"}}


def slot_names(
    optimizer: Any, model: Any, model_prefix: str = "", table: Mapping[str, Mapping[str, str]] = TF1_SLOTS
) -> dict[int, str]:
    """TF1's names of the optimizer's slot variables (`dense/kernel/Adam_1`), by the slot's id.

    TF1's Adam, Adagrad and RMSProp named a variable's slots `<variable>/<Optimizer>`,
    `<variable>/<Optimizer>_1`, ...; those of Keras's Adam, Adagrad and RMSprop
    hold the same values and get those names. Other optimizers' slots (and SGD's
    momentum, kept in other units) keep their Keras names.

    Slots are matched to their variables by the names Keras gives them:
    `<path with _ for />_<kind>` (Keras 3), `[<Optimizer>/]<kind>/<variable name>` (tf_keras).
    """
    kind = type(optimizer).__name__  # exactly: a subclass may keep other slots
    if kind not in table:
        return {}
    name_of = dict(table[kind])
    if kind == "RMSprop" and getattr(optimizer, "centered", False):
        name_of["momentum"] = "RMSProp_2"  # TF1 made "mg" before "momentum"
    by_slot_name: dict[str, str] = {}
    for variable in model.trainable_weights:
        base = tf1_name(variable, model_prefix)
        path = getattr(variable, "path", None)
        for kind, suffix in name_of.items():
            if isinstance(path, str):  # Keras 3
                by_slot_name[f"{path.replace('/', '_')}_{kind}"] = f"{base}/{suffix}"
            else:  # tf_keras: "Adam/m/dense/kernel:0"
                shared = re.sub(r":\d+$", "", str(variable.name))
                by_slot_name[f"{kind}/{shared}"] = f"{base}/{suffix}"
    found: dict[int, str] = {}
    # Keras before 3.9 names Adagrad's slots plainly "accumulator": made one per variable, in order.
    bare: dict[str, list[Any]] = {kind: [] for kind in name_of}
    for slot in optimizer_variables(optimizer):
        name = re.sub(r":\d+$", "", str(slot.name))
        # tf_keras puts the optimizer's name in front when the slots are made in its name scope (in fit).
        for key in (name, name.partition("/")[2]):
            if key in by_slot_name:
                found[id(slot)] = by_slot_name[key]
                break
        else:
            if name in bare:
                bare[name].append(slot)
    weights = list(model.trainable_weights)
    for kind, slots in bare.items():
        if len(slots) == len(weights) and all(
            tuple(s.shape) == tuple(w.shape) for s, w in zip(slots, weights, strict=True)
        ):
            for slot, weight in zip(slots, weights, strict=True):
                found[id(slot)] = f"{tf1_name(weight, model_prefix)}/{name_of[kind]}"
    return found
