"""numba kernels. Only numpy arrays and plain scalars cross into them; the
Python wrappers in the parent package validate and normalise every input."""
