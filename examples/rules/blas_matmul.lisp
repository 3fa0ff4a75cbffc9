;;; Route f32 matrix products of 2-D operands to the runtime's BLAS (sgemm) through EXTERN.
;;; Use with:  caten model.lisp -r llvm --rules examples/rules/blas_matmul.lisp
;;; The rule matches the library call `(matmul A B)` before it is expanded into a
;;; multiply-and-reduce, so the graph holds one EXTERN node instead of a [M, N, K] product.
;;; EXTERN "matmul" has a numpy reference (caten.ir.ops.EXTERNS), so `-r numpy` can run the
;;; rewritten graph too; the rule itself is marked for llvm, where it pays off.

(defoptimizer blas-matmul (matmul ?a ?b)
  => (EXTERN "matmul" ?a ?b :dtype f32 :shape [(dim ?a 0) (dim ?b 1)])
  :when (and (= (dtype ?a) f32) (= (rank ?a) 2) (= (rank ?b) 2))
  :runtime llvm)
