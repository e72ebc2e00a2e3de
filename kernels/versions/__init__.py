"""Earlier versions of the stage kernels, the steps each stage chapter takes to the final one."""
