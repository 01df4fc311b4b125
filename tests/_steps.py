"""The standard training step the tests compile: zero_grad, forward, loss, backward, step."""

from __future__ import annotations

from typing import Any

import graphc as gc


def train_step(model: Any, opt: Any, loss_fn: Any) -> Any:
    """The plain (eager) step function."""
    def step(x: Any, y: Any) -> Any:
        opt.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        return loss

    return step


def compiled_train_step(model: Any, opt: Any, loss_fn: Any, **compile_kw: Any) -> Any:
    return gc.compile(train_step(model, opt, loss_fn), **compile_kw)
