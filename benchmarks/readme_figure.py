"""The picture on the README and the book's landing page: the modeled timeline of the fused kernel.

    python -m benchmarks.readme_figure            # writes book/images/gdn_block_tkg_timeline.png

`gdn_block_tkg` (composition step 7, one NeuronCore) at Qwen3-Next-80B TP4, B = 1, on the CPU model:
one lane per engine and DMA queue, from the trn2 cost model. Modeled, not measured; re-run it after
a kernel or cost-model change and commit the PNG.
"""
import argparse
from pathlib import Path

import kernels  # noqa: F401  (first: makes `import nki` work)
import nkicpu
from kernels.configs import model_shard
from kernels.reference import make_inputs
from kernels.registry import BLOCK_DMA_KINDS, BY_NAME
from matplotlib.figure import Figure

from nkicpu.profile import dma_kinds, event_end, profile_capture
from nkicpu.timeline import Mark, plot_timeline

OUT = Path(__file__).resolve().parent.parent / "book" / "images" / "gdn_block_tkg_timeline.png"
MODEL, TP, B = "Qwen3-Next-80B", 4, 1
STEP = BY_NAME["7_ready_first"]
# Narrower than plot_timeline's 10 inches, so its text stays >= 10 px at the landing page's
# width (the image is scaled to the article column, about 750 px at a 1280 px window).
WIDTH_IN = 8


def figure():
    """The figure, and the modeled profile it draws."""
    shape = model_shard(MODEL, TP, B)
    capture = nkicpu.capture(STEP.load_kernel())(*STEP.arguments(shape, make_inputs(shape)))
    modeled = profile_capture(capture)
    qkv = [e for e in modeled.events if e["lane"].startswith("DMA")
           and e["args"]["bytes"] * 16 == shape.H * shape.conv_dim * 2][:16]   # W_in_qkv's chunks
    assert len(qkv) == 16, "the figure marks W_in_qkv's 16 chunks"
    lanes = sorted({e["lane"] for e in qkv})
    where = lanes[0] if len(lanes) == 1 else f"{len(lanes)} DMA queues"
    marks = [Mark(f"W_in_qkv: 16 chunks on {where}", min(e["start_us"] for e in qkv),
                  max(event_end(e) for e in qkv), lanes[0])]
    fig = Figure(figsize=(WIDTH_IN, 5.4))
    ax = fig.add_subplot()
    fig.subplots_adjust(left=0.16, right=0.9)
    plot_timeline(modeled, ax=ax, title=f"gdn_block_tkg, {MODEL} TP{TP}, B = {B}", marks=marks,
                  dma_kinds=dma_kinds(capture, BLOCK_DMA_KINDS["arguments"],
                                      BLOCK_DMA_KINDS["outputs"]))
    return fig, modeled


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=OUT, help=f"PNG to write (default {OUT})")
    out = parser.parse_args(argv).out
    fig, modeled = figure()
    fig.savefig(out, dpi=110, bbox_inches="tight")
    print(f"{out}: {modeled.label}, {modeled.band()}")


if __name__ == "__main__":
    main()
