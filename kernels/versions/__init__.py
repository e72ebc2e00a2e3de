"""Earlier versions of the stage kernels, kept so the book's chapters can run and profile them."""
