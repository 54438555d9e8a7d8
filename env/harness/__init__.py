"""KernelGym's evaluation harness.

A warm server (env.harness.server) imports torch and triton once and forks a
sandboxed judge per job (env.harness.sandbox, env.harness.evaluate). Before
it sees its job the judge forks the candidate's process
(env.harness.candidate_proc), the only place candidate code runs, in a
stricter sandbox; the two talk over pipes (env.harness.wire,
env.harness.remote). The judge loads the task, draws unpredictable inputs,
computes the references, checks correctness in eval() and train() mode from
the output bytes, validates the timings against its own clock, reads the
CUPTI profile and runs the anti-hacking checks (env.harness.static_checks,
env.harness.guards). The wire format to the C worker is described in
env.harness.protocol.
"""
