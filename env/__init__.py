"""drkernel's environment layer. The C side (queue, worker, CLI, reward) lives
beside this file; the Python package env.harness is KernelGym's evaluator."""
