# KernelGym bad input: a candidate that does not parse.
import torch
import torch.nn as nn


class ModelNew(nn.Module)
    def forward(self, x):
        return x
