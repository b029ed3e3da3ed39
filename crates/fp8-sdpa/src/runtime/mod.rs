//! Running kernels on a GPU (in progress).
