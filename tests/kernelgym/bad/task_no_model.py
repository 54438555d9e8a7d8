# KernelGym bad input: a task without class Model.
import torch

size = 16


def get_inputs():
    return [torch.randn(size)]


def get_init_inputs():
    return []
