"""Earlier versions of the stage kernels, each one step of a chapter, ending at kernels/<stage>.py."""
