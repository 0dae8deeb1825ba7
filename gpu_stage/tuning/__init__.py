"""Start-up measurements that choose how the matrix products run (cuBLASLt algorithms, the gemv
kernel) and the warm-up that loads every cuBLAS kernel a step can pick."""
