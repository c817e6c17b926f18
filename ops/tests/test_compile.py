"""The op and the class under torch.compile(fullgraph=True), static and dynamic shapes."""

import pytest
import torch
import torch._dynamo


class TwoConvs(torch.nn.Module):
    """Uses the op and two class objects, so tracing must tell the objects' weights apart."""

    def __init__(self, channels=3):
        super().__init__()
        self.a = torch.classes.my_ops.IdentityConvClass(channels, 3)
        self.b = torch.classes.my_ops.IdentityConvClass(channels, 5)
        self.a.set_weight(torch.randn(channels, 1, 3, 3))
        self.b.set_weight(torch.randn(channels, 1, 5, 5))

    def forward(self, x):
        y = self.a.forward(x)
        y = torch.ops.my_ops.identity_conv_op(y)
        return torch.relu(self.b.forward(y)) + 1.0


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "dynamic"])
def test_compile_fullgraph_matches_eager(dynamic, device):
    model = TwoConvs().eval()
    x = torch.randn(2, 3, 12, 12, device=device)
    expected = model(x)
    compiled = torch.compile(model, fullgraph=True, dynamic=dynamic)
    torch.testing.assert_close(compiled(x), expected)
    # other batch and spatial sizes: recompiled when static, the same graph when dynamic
    for shape in [(5, 3, 12, 12), (1, 3, 7, 9)]:
        xi = torch.randn(shape, device=device)
        torch.testing.assert_close(compiled(xi), model(xi))


def test_compile_graph_contains_the_op_and_the_class_calls():
    model = TwoConvs().eval()
    graphs = []

    def backend(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    compiled = torch.compile(model, backend=backend, fullgraph=True)
    x = torch.randn(1, 3, 6, 6)
    torch.testing.assert_close(compiled(x), model(x))
    code = "\n".join(g.code for g in graphs)
    assert "call_torchbind" in code
    assert "identity_conv_op" in code
