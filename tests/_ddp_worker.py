"""One process of a data-parallel run, started under mpirun by ``tests/test_distributed.py``.

``python tests/_ddp_worker.py OUT_PREFIX MODE [BUCKET_MB]`` trains the mlp_small step
(784-256-ReLU-10, CrossEntropyLoss, SGD with momentum) for ``STEPS`` steps; at step k every
rank takes rows ``rank::world_size`` of global batch k. Each rank saves its parameters and
losses to ``OUT_PREFIX.<rank>.npz``. MODE ``train`` runs normally; ``kill`` makes rank 1
SIGKILL itself at step 5; ``stall`` makes rank 1 sleep at step 5 (the watchdog must act).
"""

from __future__ import annotations

import os
import signal
import sys
import time

import numpy as np

import graphc as gc
import graphc.distributed as dist
from graphc import nn, optim

STEPS, BATCH, LR = 20, 96, 0.05


def data() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(123)
    X = rng.standard_normal((STEPS, BATCH, 784)).astype(np.float32)
    Y = rng.integers(0, 10, (STEPS, BATCH)).astype(np.int64)
    return X, Y


def make_model() -> nn.Module:
    gc.manual_seed(0)
    return nn.Sequential(nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 10))


def make_opt(params: object) -> optim.SGD:
    return optim.SGD(params, lr=LR, momentum=0.9, weight_decay=1e-4)


def main(out: str, mode: str, bucket_mb: float) -> None:
    dist.init()
    r, W = dist.rank(), dist.world_size()
    net = make_model()
    model = dist.DistributedDataParallel(net, bucket_cap_mb=bucket_mb)
    opt = make_opt(model.parameters())
    loss_fn = nn.CrossEntropyLoss()

    @gc.compile
    def step(x: gc.Tensor, y: gc.Tensor) -> gc.Tensor:
        opt.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        return loss

    X, Y = data()
    losses = []
    for k in range(STEPS):
        if k == 5 and r == 1 and mode == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        if k == 5 and r == 1 and mode == "stall":
            time.sleep(3600)
        losses.append(float(step(X[k][r::W], Y[k][r::W])))
    arrays = {f"p{i}": p.numpy() for i, p in enumerate(net.parameters())}
    arrays["grad0"] = net[0].weight.grad.numpy()
    np.savez(f"{out}.{r}.npz", losses=np.array(losses), buckets=len(step.variants[-1].exe.arrays),
             **arrays)
    print(f"rank {r}/{W} done", flush=True)
    dist.finalize()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], float(sys.argv[3]) if len(sys.argv) > 3 else 25.0)
