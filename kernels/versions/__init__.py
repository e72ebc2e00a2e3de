"""Earlier versions of the stage kernels: the steps of a chapter, ending at kernels/<stage>.py."""
