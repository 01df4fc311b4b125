"""The IR verifier: run after every pass in tests, so a broken pass fails where it breaks."""

from __future__ import annotations

from typing import TYPE_CHECKING

from . import ops
from . import shapes as sh

if TYPE_CHECKING:  # types only: the printer and verifier never need the node classes at run time
    from .graph import Graph


class VerifyError(AssertionError):
    pass


def verify(g: Graph) -> None:
    """Check SSA order, that every node's shape/dtype matches its rule, and state slots.

    Guarantees on success: every non-input node's operands precede it; every op is in
    ``OP_INFO``; recorded shapes and dtypes equal what the shape rules give; input names are
    unique; every update writes a value of its slot's declared type (when the slot is read);
    every scan's body verifies too (once per body), and a scan is read only by ``scan_out``.
    """
    seen: set[int] = set()
    names: set[str] = set()
    for n in g.inputs:
        if n.op != "input":
            raise VerifyError(f"graph input {n} is not an input node")
        nm = n.attrs["name"]
        if nm in names:
            raise VerifyError(f"duplicate input name {nm!r}")
        names.add(nm)
        seen.add(n.id)
    input_ids = {n.id for n in g.inputs}
    bodies: set[int] = set()
    for n in g.nodes():
        if n.op not in ops.OP_INFO:
            raise VerifyError(f"unknown op {n.op!r} in {n}")
        if n.op == "input":
            if n.id not in input_ids:
                raise VerifyError(f"input node {n.attrs.get('name')!r} is not a graph input")
            continue
        for x in n.inputs:
            if x.id not in seen:
                raise VerifyError(f"{n} uses {x} before its definition")
        try:
            shape, dtype = ops.infer(n.op, n.inputs, n.attrs)
        except Exception as e:  # noqa: BLE001 - rewrap any rule failure as a verify error
            raise VerifyError(f"{n}: shape rule failed: {e}") from e
        if not sh.same_shape(shape, n.shape) or dtype is not n.dtype:
            raise VerifyError(
                f"{n}: recorded {n.dtype.short}{sh.fmt_shape(n.shape)} but rule gives "
                f"{dtype.short}{sh.fmt_shape(shape)}"
            )
        for x in n.inputs:
            if x.op == "scan" and n.op != "scan_out":
                raise VerifyError(f"{n} reads the scan {x} directly (only scan_out may)")
        if n.op == "scan" and id(n.attrs["body"]) not in bodies:
            bodies.add(id(n.attrs["body"]))
            try:
                verify(n.attrs["body"])
            except VerifyError as e:
                raise VerifyError(f"in the body of {n}: {e}") from e
        seen.add(n.id)
    by_name = {n.attrs["name"]: n for n in g.inputs}
    slots: set[str] = set()
    for slot, val in g.updates:
        if slot in slots:
            raise VerifyError(f"state slot {slot!r} updated twice")
        slots.add(slot)
        src = by_name.get(slot)
        if src is not None and (not sh.same_shape(src.shape, val.shape)
                                or src.dtype is not val.dtype):
            raise VerifyError(
                f"update {slot}: slot is {src.dtype.short}{sh.fmt_shape(src.shape)}, value is "
                f"{val.dtype.short}{sh.fmt_shape(val.shape)}"
            )
