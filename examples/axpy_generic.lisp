;;; axpy_generic.lisp -- Z = A*X + Y for any dtype, with a type variable.
;;;
;;; T is a type variable (any name inside {} that is not a dtype). From Python it is bound
;;; from the argument dtypes at call time, one compiled variant per binding:
;;;     mod = caten.load("examples/axpy_generic.lisp", runtime="numpy")
;;;     mod.axpy_t(np.float64(2.0), x64, y64)      ; T = f64
;;;     mod.axpy_t(np.int32(3), xi, yi)             ; T = i32
;;; To compile it ahead of time, bind T on the command line:
;;;     caten -r llvm -D T=f64 examples/axpy_generic.lisp -o libaxpy_generic.so

(composite axpy-t ((A{T}) (X{T}[N]) (Y{T}[N]) -> (Z{T}[N]))
  "A*X + Y for any dtype T"
  (return (+ (* A X) Y)))
