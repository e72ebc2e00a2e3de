"""The GDN layer under tensor parallelism: tp rank processes, each running `kernels.gdn_layer_tkg`
on its shard and its own state pools, against transformers' layer.

    python -m benchmarks.tp_layer --tp 4 [--model qwen3_5|qwen3_next] [--steps 3] [--batch 2]
                                  [--seed 0] [--layer kernel|reference]

or from a notebook cell: `print(summary(run(tp=4)))`.

The layer is a small random config of the real module (transformers' Qwen3_5 / Qwen3Next config
class, the shape TINY), every parameter drawn, the ones transformers initialises to constants
(the norms' weights, dt_bias) included, and rounded to bf16. The parent process loads the shards
(kernels.hf_weights.gdn_layer_shards) and cuts the pools (split_pools); it then starts tp rank
processes (spawn), which meet in a torch.distributed gloo group (CPU) through a file store in a
temporary directory. Each rank keeps its own NumPy pools of N = B + 2 slots, sequence b at a
permuted slot, read and written in place every step, and per decode step (T = 1) runs the kernel
under nki.simulate, all-reduces the fp32 partials (the sum over ranks of out_proj's rows) and does
the caller's part of the decoder layer: the sum rounded to bf16 (the model dtype of out_proj's
output) plus the residual, hidden.

The reference is transformers' own modules composed as Qwen3_5DecoderLayer / Qwen3NextDecoderLayer
compose them up to the residual add (the MLP or MoE after it left out): input_layernorm, then
linear_attn with a DynamicCache carrying the states from step to step (seeded through its public
update methods from the states the pools start with), then + hidden; in fp32 on the bf16-rounded
parameters. Each step's cosine is reported for the attention output (the all-reduced partial
against linear_attn's output) and for the layer output; the requirement is
kernels.accuracy.LAYER_COSINE at every step. `--layer reference` runs kernels.reference's
gdn_layer_tkg_ref in the ranks instead of the kernel: the harness checked on its own.
"""
import argparse
import os
import sys
import tempfile
import time
from datetime import timedelta

import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

import kernels
import nki
from kernels.accuracy import LAYER_COSINE, cosine
from kernels.configs import GDNShape
from kernels.hf_weights import gdn_layer_shards, split_pools
from kernels.reference import gdn_layer_tkg_ref, to_numpy, to_torch
from kernels.registry import LAYER_ARGS

TINY = GDNShape(B=2, H=256, nk=4, nv=8, dk=32, dv=32, K=4, name="tiny")
MODELS = ("qwen3_5", "qwen3_next")
LAYERS = ("kernel", "reference")
SPARE_SLOTS = 2   # slots no sequence uses, so a wrong slot shows


def build_layer(model, shape=TINY, seed=0):
    """(config, input_layernorm, linear_attn) of a random one-layer config of `model`, fp32 modules
    holding bf16-rounded parameters."""
    # transformers is imported here, not at the top: the rank processes import this module and
    # need none of it.
    if model == "qwen3_5":
        from transformers.models.qwen3_5.configuration_qwen3_5 import Qwen3_5TextConfig as Config
        from transformers.models.qwen3_5.modeling_qwen3_5 import Qwen3_5GatedDeltaNet as GDN
        from transformers.models.qwen3_5.modeling_qwen3_5 import Qwen3_5RMSNorm as RMSNorm
    elif model == "qwen3_next":
        from transformers.models.qwen3_next.configuration_qwen3_next import Qwen3NextConfig as Config
        from transformers.models.qwen3_next.modeling_qwen3_next import Qwen3NextGatedDeltaNet as GDN
        from transformers.models.qwen3_next.modeling_qwen3_next import Qwen3NextRMSNorm as RMSNorm
    else:
        raise ValueError(f"model: expected one of {', '.join(MODELS)}, got {model!r}")
    s = shape
    config = Config(hidden_size=s.H, linear_num_key_heads=s.nk, linear_num_value_heads=s.nv,
                    linear_key_head_dim=s.dk, linear_value_head_dim=s.dv, linear_conv_kernel_dim=s.K,
                    num_hidden_layers=1, layer_types=["linear_attention"], num_attention_heads=2,
                    num_key_value_heads=1, head_dim=32, rms_norm_eps=1e-6, hidden_act="silu")
    torch.manual_seed(seed)
    norm, attn = RMSNorm(s.H, eps=config.rms_norm_eps), GDN(config, layer_idx=0)
    with torch.no_grad():   # transformers initialises these to constants: a wrong mapping would hide
        norm.weight.copy_(0.2 * torch.randn(s.H))
        attn.norm.weight.copy_(1 + 0.2 * torch.randn(s.dv))
        attn.dt_bias.copy_(1 + 0.5 * torch.randn(s.nv))
        attn.A_log.copy_(torch.log(torch.empty(s.nv).uniform_(0.01, 16)))
    return config, norm.to(torch.bfloat16).float().eval(), attn.to(torch.bfloat16).float().eval()


def decode_inputs(shape, steps, seed=0):
    """(hidden [steps, B, 1, H] bf16, conv_state_pool [N, conv_dim, K] bf16, recurrent_state_pool
    [N, nv, dk, dv] fp32, slots [B] int32): every slot's states drawn, sequence b at slot
    slots[b] != b of N = B + SPARE_SLOTS, drawn at random."""
    s, gen = shape, torch.Generator().manual_seed(seed)
    N = s.B + SPARE_SLOTS
    hidden = torch.randn(steps, s.B, 1, s.H, generator=gen).to(torch.bfloat16)
    conv_pool = torch.randn(N, s.conv_dim, s.K, generator=gen).to(torch.bfloat16)
    state_pool = 0.1 * torch.randn(N, s.nv, s.dk, s.dv, generator=gen)
    slots = torch.randperm(N, generator=gen)[:s.B]
    while (slots == torch.arange(s.B)).any():   # no sequence at its own index: a mix-up shows
        slots = torch.randperm(N, generator=gen)[:s.B]
    return hidden, conv_pool, state_pool, slots.to(torch.int32)


def hf_layer_steps(config, input_layernorm, linear_attn, hidden, conv_state, recurrent_state):
    """transformers' layer up to the residual add, one cached decode step per hidden[i], in fp32:
    attention outputs and layer outputs, each [steps, B, 1, H], and the cache's final conv and
    recurrent states. The states [B, ...] seed the cache."""
    from transformers.cache_utils import DynamicCache
    cache = DynamicCache(config=config)
    # A first conv update of exactly K columns is stored as is (LinearAttentionLayer).
    cache.update_conv_state(conv_state.float(), 0, conv_kernel_size=conv_state.shape[-1])
    cache.update_recurrent_state(recurrent_state.float().clone(), 0)
    attn, out = [], []
    with torch.no_grad():
        for x in hidden:
            residual = x.float()
            a = linear_attn(input_layernorm(residual), cache=cache)
            attn.append(a)
            out.append(residual + a)
    layer = cache.layers[0]
    return torch.stack(attn), torch.stack(out), layer.conv_states[0], layer.recurrent_states[0]


def layer_step(layer):
    """The rank's call of the layer on NumPy arguments (LAYER_ARGS order): the kernel under
    nki.simulate, or its torch reference; -> (partial, conv_state_pool, recurrent_state_pool)."""
    if layer == "kernel":
        return nki.simulate(kernels.gdn_layer_tkg)

    def reference(*args):
        return tuple(to_numpy(t) for t in gdn_layer_tkg_ref(*map(to_torch, args)))
    return reference


def rank_main(rank, tp, layer, workdir, shards, pools, hidden, slots):
    """One rank's process: its shard and pools, the decode steps, the all-reduce and the residual.
    Rank 0 saves the steps' attention outputs (fp32) and layer outputs (bf16) to workdir."""
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{workdir}/store", rank=rank, world_size=tp,
                            timeout=timedelta(seconds=120))
    try:
        step = layer_step(layer)
        conv_pool, state_pool = pools[rank]
        read = slots.numpy()
        write = read[:, None].copy()   # T = 1: each sequence's new states back to its own slot
        kernels.check_pool_indices(read, write, conv_pool.shape[0])
        attn, out = [], []
        for x in hidden:
            args = dict(shards[rank], hidden=to_numpy(x), conv_state_pool=conv_pool,
                        recurrent_state_pool=state_pool, read_indices=read, write_indices=write)
            partial, conv_pool, state_pool = step(*(args[n] for n in LAYER_ARGS))
            total = torch.from_numpy(np.array(partial, dtype=np.float32))
            dist.all_reduce(total)   # SUM: out_proj's output from every rank's rows
            attn.append(total)
            out.append(total.to(torch.bfloat16) + x)   # the decoder layer's residual add, in bf16
        if rank == 0:
            torch.save({"attn": torch.stack(attn), "out": torch.stack(out)},
                       os.path.join(workdir, "rank0.pt"))
    finally:
        dist.destroy_process_group()


def run(tp=4, model="qwen3_5", steps=3, batch=2, seed=0, layer="kernel"):
    """The harness: tp rank processes against transformers' layer over `steps` decode steps.

    Returns a dict: the settings, slots (sequence b's slot), attn_cosine and layer_cosine (one per
    step), required (LAYER_COSINE), ok (every cosine at least that) and seconds (the ranks' wall
    time, process start-up included).
    """
    if layer not in LAYERS:
        raise ValueError(f"layer: expected one of {', '.join(LAYERS)}, got {layer!r}")
    shape = TINY.with_batch(batch)
    config, input_layernorm, linear_attn = build_layer(model, shape, seed)
    hidden, conv_pool, state_pool, slots = decode_inputs(shape, steps, seed)
    shards = gdn_layer_shards(input_layernorm, linear_attn, tp)
    pools = split_pools(to_numpy(conv_pool), to_numpy(state_pool), shape.nk, tp)
    want_attn, want_out, _, _ = hf_layer_steps(config, input_layernorm, linear_attn, hidden,
                                         conv_pool[slots.long()], state_pool[slots.long()])
    with tempfile.TemporaryDirectory() as workdir:
        start = time.perf_counter()
        mp.spawn(rank_main, args=(tp, layer, workdir, shards, pools, hidden, slots), nprocs=tp)
        seconds = time.perf_counter() - start
        got = torch.load(os.path.join(workdir, "rank0.pt"))
    attn_cos = [cosine(to_numpy(g), to_numpy(w)) for g, w in zip(got["attn"], want_attn)]
    layer_cos = [cosine(to_numpy(g), to_numpy(w)) for g, w in zip(got["out"], want_out)]
    return {"model": model, "tp": tp, "batch": batch, "steps": steps, "seed": seed, "layer": layer,
            "slots": slots.tolist(), "attn_cosine": attn_cos, "layer_cosine": layer_cos,
            "required": LAYER_COSINE, "ok": min(attn_cos + layer_cos) >= LAYER_COSINE,
            "seconds": seconds}


def summary(report):
    """`run`'s report as a few printable lines: a row per step."""
    r = report
    how = "the kernel under nki.simulate" if r["layer"] == "kernel" else "gdn_layer_tkg_ref"
    lines = [f"{r['model']} GDN layer, TP {r['tp']} ({how}), B {r['batch']} at slots {r['slots']}, "
             f"seed {r['seed']}: {r['seconds']:.1f} s",
             f"{'step':>4}  {'attention cosine':>16}  {'layer cosine':>12}"]
    lines += [f"{i:>4}  {a:>16.7f}  {c:>12.7f}"
              for i, (a, c) in enumerate(zip(r["attn_cosine"], r["layer_cosine"]))]
    lines.append(f"{'ok' if r['ok'] else 'FAILED'}: every cosine >= {r['required']} required")
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tp", type=int, default=4)
    parser.add_argument("--model", choices=MODELS, default="qwen3_5")
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--layer", choices=LAYERS, default="kernel")
    a = parser.parse_args(argv)
    report = run(a.tp, a.model, a.steps, a.batch, a.seed, a.layer)
    print(summary(report))
    return 0 if report["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
