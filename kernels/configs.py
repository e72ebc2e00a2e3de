"""Real Qwen3-Next / Qwen3.5 GDN layer shapes and their tensor-parallel shards.

Plain data, no NKI calls: tests, notebooks and benchmarks take their shapes from here so that
every kernel is exercised at the shapes a deployment really sees (the book's page on the models,
book/gdn/models.ipynb).
"""
from dataclasses import dataclass, replace


@dataclass(frozen=True)
class GDNShape:
    """Per-device shapes of one GDN decode step.

    B batch, H hidden size, nk key heads, nv value heads, dk / dv head dims, K conv window.
    """
    B: int
    H: int
    nk: int
    nv: int
    dk: int = 128
    dv: int = 128
    K: int = 4
    name: str = ""

    @property
    def G(self):
        return self.nv // self.nk

    @property
    def key_dim(self):
        return self.nk * self.dk

    @property
    def value_dim(self):
        return self.nv * self.dv

    @property
    def conv_dim(self):
        return 2 * self.key_dim + self.value_dim

    def with_batch(self, B):
        return replace(self, B=B)


# Full models (TP1). All share nk = 16, dk = dv = 128, K = 4.
MODELS = {
    "Qwen3-Next-80B": dict(H=2048, nk=16, nv=32),
    "Qwen3.5-0.8B": dict(H=1024, nk=16, nv=16),
    "Qwen3.5-2B": dict(H=2048, nk=16, nv=16),
    "Qwen3.5-4B": dict(H=2560, nk=16, nv=32),
    "Qwen3.5-9B": dict(H=4096, nk=16, nv=32),
    "Qwen3.5-27B": dict(H=5120, nk=16, nv=48),
    "Qwen3.5-35B-A3B": dict(H=2048, nk=16, nv=32),
    "Qwen3.5-122B-A10B": dict(H=3072, nk=16, nv=64),
    "Qwen3.5-397B-A17B": dict(H=4096, nk=16, nv=64),
}


def model_shard(model, tp, B=1):
    """Per-device shape of `model` under tensor parallelism `tp` (heads split contiguously, H replicated)."""
    m = MODELS[model]
    if m["nk"] % tp or m["nv"] % tp:
        raise ValueError(f"tp: expected a divisor of nk={m['nk']} and nv={m['nv']}, got {tp}")
    return GDNShape(B=B, H=m["H"], nk=m["nk"] // tp, nv=m["nv"] // tp, name=f"{model} TP{tp}")


# The per-device shards every stage is tested at (issue: stage kernels).
TEST_SHARDS = [
    model_shard("Qwen3-Next-80B", 4),      # nk 4, nv 8, G 2
    model_shard("Qwen3.5-27B", 8),         # nk 2, nv 6, G 3
    model_shard("Qwen3.5-397B-A17B", 16),  # nk 1, nv 4, G 4
    model_shard("Qwen3.5-0.8B", 1),        # nk 16, nv 16, G 1
]

# The per-device configurations the benchmark sweep covers.
SWEEP_SHARDS = [
    model_shard("Qwen3-Next-80B", 1),
    model_shard("Qwen3-Next-80B", 4),
    model_shard("Qwen3.5-0.8B", 1),
    model_shard("Qwen3.5-9B", 2),
    model_shard("Qwen3.5-27B", 8),
    model_shard("Qwen3.5-397B-A17B", 16),
]
SWEEP_BATCHES = (1, 8, 32, 64)
# Tokens per sequence in one launch (speculative decoding's verify step) for the entries that take
# several, and the batches those T > 1 rows run at; T = 1 runs at every SWEEP_BATCHES.
SWEEP_TOKENS = (1, 2, 4, 8)
SWEEP_TOKEN_BATCHES = (1, 8)
