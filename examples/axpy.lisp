;;; axpy.lisp -- Z = A*X + Y, the BLAS level-1 "hello world".
;;;
;;;     caten -r llvm examples/axpy.lisp -o libaxpy.so        ; shared library + axpy.h:
;;;         int32_t axpy(const float *A, const float *X, const float *Y, float *Z, int64_t N);
;;;     caten run examples/axpy.lisp A=a.npy X=x.npy Y=y.npy -o z.npy
;;;     mod.axpy(np.float32(2.0), x, y)                        ; from Python
;;;
;;; See axpy_generic.lisp for a version that works for every dtype.

;; A{f32} with no [dims] is a scalar (a rank-0 tensor); it broadcasts against X.
;; N is a dimension symbol: bound from X's shape at call time, a runtime argument of the
;; compiled kernel (or fixed at compile time with -D N=1024). Y must agree with X on N.
(composite axpy ((A{f32}) (X{f32}[N]) (Y{f32}[N]) -> (Z{f32}[N]))
  "single-precision A*X + Y"
  (+ (* A X) Y))                ; without `return`, the last expression is the output
