"""Shape sweeps of the GDN decode kernels over real per-device model configurations.

`python -m benchmarks.sweep` profiles every registered kernel (`kernels.registry`) at
the shards in `kernels.configs.SWEEP_SHARDS` and the batches in `SWEEP_BATCHES`, with the trn2
cost model, and writes JSON plus a plot to `benchmarks/results/` (git-ignored). Every time in the
output is modeled (trn2 cost model), never measured, except `cpu_model_wall_s`: the host's wall
time for running the CPU model itself.
"""
