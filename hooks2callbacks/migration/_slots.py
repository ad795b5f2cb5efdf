"""Names that differ between the two sides: the slots' `assignment_map` shown, checkpoints compared through it.

A custom TF1 optimizer named its slots as it liked (BERT's `AdamWeightDecayOptimizer`:
`<variable>/adam_m`, `<variable>/adam_v`); a Keras optimizer names them after the variable's path
and the slot's kind (`<path with _ for />_<kind>`). `restore_tf1_checkpoint` cannot match those
by name; its `proposed_map` matches them by what they are (the slot of which variable, of which
kind, of which shape; `hooks2callbacks._tf1_restore._propose_map`, the one proposer). Here that
proposal is shown once, as code to paste, and the checkpoints compared under the TF1 names.
"""

from __future__ import annotations

from collections.abc import Mapping

from hooks2callbacks._tf1_restore import source_name
from hooks2callbacks.migration._record import _Side


def slot_map_note(proposal: Mapping[str, str], assignment_map: Mapping[str, str] | None) -> str:
    """The note that shows the proposal once, as code to paste."""
    entries = "\n".join(f"    {theirs!r}: {mine!r}," for theirs, mine in sorted(proposal.items()))
    given = "**assignment_map, " if assignment_map else ""
    return (
        f"The TF1 graph holds them under other names (its optimizer's slots under another scope, or a "
        f"custom optimizer's names): matched by their variable, slot kind and shape, these {len(proposal)} "
        "entries restore them:\n"
        f"slot_map = {{\n{entries}\n}}\n"
        f"check_migration(..., assignment_map={{{given}**slot_map}})"
    )


def keras_checkpoints_as_tf1(side: _Side, assignment_map: Mapping[str, str] | None) -> None:
    """Renames the variables of the checkpoints the Keras side's hooks wrote to the TF1 graph's names.

    The Keras side writes the model's TF1 names; `assignment_map` says which
    checkpoint (TF1 graph) name each was read from.
    """
    if not assignment_map:
        return
    for events in side.events:
        for event in events:
            for item, values in list(event.items.items()):
                if item.startswith("checkpoint ") and isinstance(values, dict):
                    event.items[item] = {source_name(name, assignment_map): v for name, v in values.items()}
