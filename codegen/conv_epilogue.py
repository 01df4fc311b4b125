"""A convolution's epilogue: the elementwise consumer its kernel runs over its result.

The planner (``planning._plan_conv_epilogues``) pairs a convolution with the kernel that
alone reads its result; ``codegen.lower`` builds that consumer as a function of its own and
hands it to the convolution's kernel (``Epilogue``). A kernel that runs images in a thread
task stages each image's result in its thread's buffer and calls the consumer over that
image while it is in cache (``out_image``, ``after_image``); any other kernel writes the
whole result and the consumer runs over it once at the end (``finish_epilogue``). Here,
below every convolution kernel family, so that each can stage its images.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from llvmlite import ir

from .llvm_util import I8P, I32, I64, for_range, i64
from .parallel import KernelTask as _Task
from .parallel import is_odd

# a convolution's epilogue as the kernel calls it: ``i32 (ctx, stage, lo, hi)``
EPILOGUE_FN = ir.FunctionType(I32, [I8P, I8P, I64, I64])


@dataclass
class Epilogue:
    """The consumer a convolution kernel runs over its result (``planning``'s
    ``_plan_conv_epilogues``; built by ``codegen.lower``): ``fn`` (an ``EPILOGUE_FN``
    as ``i8*``) and ``ctx``, the kernel's last two arguments, and each thread's staging
    buffer for one image (``stages``). A task body that runs images calls
    ``fn(ctx, stage, image, image + 1)`` after each image, the result staged; otherwise the
    kernel calls ``fn(ctx, null, 0, images)`` once at the end, the result already in the
    consumer's buffer; ``staged`` records which, so that the entry function passes that
    form of the consumer."""

    fn: ir.Value
    ctx: ir.Value
    stages: tuple[ir.Value, ir.Value]
    staged: bool = False


def call_epilogue(b: ir.IRBuilder, fn: ir.Value, args: list[ir.Value]) -> None:
    b.call(b.bitcast(fn, EPILOGUE_FN.as_pointer()), args)


def epilogue_values(k: Any) -> list[ir.Value]:
    """What a task body needs to stage and run ``k``'s epilogue (none without one)."""
    epi = k.epilogue
    return [] if epi is None else [epi.fn, epi.ctx, *epi.stages]


def out_image(task: _Task, out: ir.Value, nb: ir.Value) -> tuple[ir.Value, ir.Value]:
    """Where a task body stores image ``nb`` of its result: ``(buffer, image index)``, the
    output at ``nb``, or, when the kernel has an epilogue, this thread's staging buffer at
    image 0 (``after_image`` runs the epilogue from there into the output)."""
    epi = task.k.epilogue
    if epi is None:
        return out, nb
    b = task.b
    stage = b.select(task.first, task[epi.stages[0]], task[epi.stages[1]])
    return b.bitcast(stage, out.type), i64(0)


def after_image(task: _Task, nb: ir.Value) -> None:
    """In a task body, after image ``nb`` is stored (``out_image``): the epilogue over that
    image, from the staging buffer (in L1 or L2) into the output."""
    epi = task.k.epilogue
    if epi is None:
        return
    b = task.b
    stage = b.select(task.first, task[epi.stages[0]], task[epi.stages[1]])
    call_epilogue(b, task[epi.fn], [task[epi.ctx], stage, nb, b.add(nb, i64(1))])
    epi.staged = True


@dataclass
class PartImage:
    """One image of a thread part's share of the batch (``part_images``): its index
    ``nb``, where to store it (``o`` at image index ``ni``, as ``out_image``), ``split``
    (``count`` -> this part's ``[lo, hi)`` of the image's ``count`` work items: all of them
    for an image the part takes whole, its half for the odd batch's last image) and
    ``last`` (i1: this is that shared last image)."""

    nb: ir.Value
    o: ir.Value | None
    ni: ir.Value | None
    split: Callable[[ir.Value], tuple[ir.Value, ir.Value]]
    last: ir.Value


def part_images(task: _Task, out: ir.Value | None, nimg: ir.Value,
                before: Callable[[], None] | None = None) -> Iterator[PartImage]:
    """A convolution task's images as one loop, its body emitted once: half of an even
    batch's images to each part, whole (``KernelTask.split_even``), then an odd batch's last
    image (all of a batch of one) to both, each with its share of the image's work items
    (``PartImage.split``), stored straight to ``out``; the kernel runs the epilogue over
    that image afterwards (``conv._odd_epilogue``).

    The body used to be emitted twice, for the whole images and for the shared last one:
    that second copy was a third of ResNet-18's convolution code and of its LLVM time.
    Here the part's items are ``lo <= j < hi + odd``, the one past ``hi`` standing for image
    ``nimg - 1``; what differs between the two kinds (the work range, the staging buffer,
    the per-image epilogue) is selected at run time. ``before`` runs once before the first
    image, only when the part has one (zeroing its grid's border). ``out`` None: the task
    stores no image of a result (a weight gradient's sums), ``o`` and ``ni`` are None."""
    b = task.b
    lo, hi = task.split_even(nimg)
    odd = b.zext(is_odd(b, nimg), I64)
    end = b.add(hi, odd)
    epi = None if out is None else task.k.epilogue
    with b.if_then(b.icmp_signed("<", lo, end)):
        if before is not None:
            before()
        with for_range(b, lo, end, name="img") as j:
            last = b.icmp_signed(">=", j, hi)
            nb = b.select(last, b.sub(nimg, i64(1)), j)
            o, ni = (None, None) if out is None else out_image(task, out, nb)
            if epi is not None:
                o, ni = b.select(last, out, o), b.select(last, nb, ni)

            def split(count: ir.Value, last: ir.Value = last) -> tuple[ir.Value, ir.Value]:
                slo, shi = task.split(count)
                return b.select(last, slo, i64(0)), b.select(last, shi, count)

            yield PartImage(nb, o, ni, split, last)
            if epi is not None:
                with b.if_then(b.not_(last)):
                    after_image(task, nb)


def finish_epilogue(k: Any) -> None:
    """After a convolution kernel's code: its epilogue in place over the whole result,
    unless its task body ran it image by image (the batched Winograd and im2col kernels and
    the direct loops write the whole result first)."""
    epi = k.epilogue
    if epi is not None and not epi.staged:
        nimg = k.sym(k.node.shape[0])
        call_epilogue(k.b, epi.fn, [epi.ctx, ir.Constant(I8P, None), i64(0), nimg])


__all__ = ["EPILOGUE_FN", "Epilogue", "call_epilogue", "epilogue_values", "out_image",
           "after_image", "PartImage", "part_images", "finish_epilogue"]
