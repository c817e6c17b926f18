"""Exports tp_model.pt2: relu(tp::affine(x)), x float32 [2, 4], with export_tools.   export_model.py LIBRARY OUT"""
import sys

import torch

from export_tools import export_package, load_ops_library

load_ops_library(sys.argv[1])
torch.library.register_fake("tp::affine")(lambda x: torch.empty_like(x))


class Model(torch.nn.Module):
    def forward(self, x):
        return torch.relu(torch.ops.tp.affine(x))


export_package(Model(), (torch.randn(2, 4),), sys.argv[2], golden=2, cpu_isa="default")
