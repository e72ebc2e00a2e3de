"""The composition steps before the shipped kernel, each a kernel of its own (the book's
composition part builds the fused decode step one idea per step, in this order):

  0  staged.gdn_block_staged           the five stage kernels, five launches, activations in HBM
  1  staged.gdn_block_staged_tkg       stages 4 and 5 fused into `gdn_tkg`: four launches
  2  scratch.gdn_block_tkg_scratch     one kernel, the stages' HBM bodies chained through scratch
  3  onchip.gdn_block_tkg_onchip       every intermediate on chip, GQA by indexing
  4  z_last.gdn_block_tkg_z_last       z projected after the recurrence where its weights outweigh
                                       the state: they stream while the delta rule computes
  5  two_cores.gdn_block_tkg_two_cores launched as [2]: the value heads split over two cores
  6  queues.gdn_block_tkg_queues       DMA queues run in issue order: z's weights ahead of the
                                       state stores, every weight on one queue in TensorE's order
  7  kernels.gdn_block.gdn_block_tkg   the shipped kernel: ready work first

Every step takes the arguments of `gdn_block_tkg` and returns its results. Steps 3 to 6 are a
plan and a body of phase calls each, one idea apart; steps 0 and 1 are host code.
"""
