;;; mlp.lisp -- a two-layer perceptron on a batch of vectors: Y = relu(X W1 + b1) W2 + b2.
;;;
;;; Both products are 2-D f32 matmuls (inside `linear`), so the rule file
;;; examples/rules/blas_matmul.lisp turns each into one EXTERN "matmul" call on the llvm runtime:
;;;     caten examples/mlp.lisp --rules examples/rules/blas_matmul.lisp --explain-rules --emit ir
;;; Without the rule, caten generates its own tiled GEMM kernels for them.

(composite mlp2 ((X{f32}[B, D]) (W1{f32}[D, H]) (b1{f32}[H]) (W2{f32}[H, K]) (b2{f32}[K])
                 -> (Y{f32}[B, K]))
  "Linear(D->H) -> ReLU -> Linear(H->K)"
  (linear (relu (linear X W1 b1)) W2 b2))
