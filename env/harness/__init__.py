"""KernelGym's evaluation harness.

A warm server (env.harness.server) imports torch and triton once and forks a
sandboxed child per job (env.harness.sandbox). The child loads the task and the
candidate as separate modules, checks correctness in eval() and train() mode,
times both with CUDA events, profiles the candidate's kernels through CUPTI and
runs the anti-hacking checks (env.harness.static_checks, env.harness.guards).
The wire format is described in env.harness.protocol.
"""
