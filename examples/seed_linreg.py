"""The classic PyTorch workflow (linear regression, 200 epochs), with the step compiled.

The loop below is the PyTorch tutorial's, with `torch` replaced by `graphc` and the training
step wrapped in `@gc.compile`: graphc traces forward, loss, zero_grad, backward and the SGD
update into one IR graph and runs it as a single native function.
"""

import numpy as np

import graphc as gc
from graphc import nn, optim

gc.manual_seed(42)

# data: y = 0.7x + 0.3, 80/20 split
weight, bias = 0.7, 0.3
X = np.arange(0, 1, 0.02, dtype=np.float32)[:, None]
y = weight * X + bias
split = int(0.8 * len(X))
X_train, y_train = X[:split], y[:split]
X_test, y_test = X[split:], y[split:]


class LinearRegressionModel(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear_layer = nn.Linear(in_features=1, out_features=1)

    def forward(self, x):
        return self.linear_layer(x)


model = LinearRegressionModel()
loss_fn = nn.L1Loss()
optimizer = optim.SGD(params=model.parameters(), lr=0.01)


@gc.compile(example_args=(X_train, y_train))
def train_step(x, y):
    y_pred = model(x)
    loss = loss_fn(y_pred, y)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    return loss


@gc.compile(example_args=(X_test, y_test))
def test_step(x, y):
    with gc.inference_mode():
        return loss_fn(model(x), y)


def main() -> None:
    print(f"initial parameters: {model.state_dict()}")
    epochs = 200
    for epoch in range(epochs):
        model.train()
        loss = train_step(X_train, y_train)
        model.eval()
        test_loss = test_step(X_test, y_test)
        if epoch % 10 == 0:
            print(f"Epoch: {epoch} | Train Loss: {loss.item():.6f} | "
                  f"Test Loss: {test_loss.item():.6f}")
    print(f"learned parameters: {model.state_dict()}")
    print(f"compiled {train_step.compile_count} train step(s) and "
          f"{test_step.compile_count} test step(s)")


if __name__ == "__main__":
    main()
