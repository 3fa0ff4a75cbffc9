;;; Elementwise math on float tensors, built on EXP2, LOG2, SIN, SQRT and RECIP.

(composite exp ((X{T}[...]) -> (Y{T}[...])) "e**x" (EXP2 (MUL X 1.4426950408889634)))
(composite log ((X{T}[...]) -> (Y{T}[...])) "natural logarithm" (MUL (LOG2 X) 0.6931471805599453))
(composite exp2 ((X{T}[...]) -> (Y{T}[...])) "2**x" (EXP2 X))
(composite log2 ((X{T}[...]) -> (Y{T}[...])) "base-2 logarithm" (LOG2 X))
(composite sqrt ((X{T}[...]) -> (Y{T}[...])) "square root" (SQRT X))
(composite rsqrt ((X{T}[...]) -> (Y{T}[...])) "1/sqrt(x)" (RECIP (SQRT X)))
(composite sin ((X{T}[...]) -> (Y{T}[...])) "sine" (SIN X))
(composite cos ((X{T}[...]) -> (Y{T}[...])) "cosine" (SIN (ADD (NEG X) 1.5707963267948966)))
(composite tan ((X{T}[...]) -> (Y{T}[...])) "tangent" (/ (sin X) (cos X)))

(composite sigmoid ((X{T}[...]) -> (Y{T}[...])) "1/(1+e**-x)" (RECIP (ADD 1 (exp (NEG X)))))
(composite tanh ((X{T}[...]) -> (Y{T}[...]))
  "hyperbolic tangent, via e**-2|x| so that it never overflows"
  (let ((t (exp (MUL (abs X) -2))))
    (MUL (sign X) (/ (- 1 t) (+ 1 t)))))
(composite relu ((X{T}[...]) -> (Y{T}[...])) "max(x, 0)" (MAX X 0))
(composite silu ((X{T}[...]) -> (Y{T}[...])) "x * sigmoid(x)" (MUL X (sigmoid X)))
(composite elu ((X{T}[...]) -> (Y{T}[...])) "x if x > 0 else e**x - 1 (alpha 1)" (WHERE (CMPLT 0 X) X (- (exp X) 1)))
(composite selu ((X{T}[...]) -> (Y{T}[...]))
  "scale * (x if x > 0 else alpha (e**x - 1))"
  (MUL 1.0507009873554805 (WHERE (CMPLT 0 X) X (MUL 1.6732632423543772 (- (exp X) 1)))))
(composite softplus ((X{T}[...]) -> (Y{T}[...]))
  "log(1 + e**x), computed stably as max(x, 0) + log(1 + e**-|x|)"
  (+ (MAX X 0) (log (+ 1 (exp (NEG (abs X)))))))

(composite erfc-abs ((X{T}[...]) -> (Y{T}[...]))
  "erfc(|x|) by the Chebyshev fit of Numerical Recipes (fractional error < 1.2e-7)"
  (let ((z (abs X))
        (t (RECIP (+ 1 (* 0.5 (abs X))))))
    (* t (exp (+ (NEG (* z z)) -1.26551223
                 (* t (+ 1.00002368 (* t (+ 0.37409196 (* t (+ 0.09678418 (* t (+ -0.18628806
                 (* t (+ 0.27886807 (* t (+ -1.13520398 (* t (+ 1.48851587 (* t (+ -0.82215223
                 (* t 0.17087277))))))))))))))))))))))
(composite erf ((X{T}[...]) -> (Y{T}[...])) "the error function" (* (sign X) (- 1 (erfc-abs X))))
(composite gelu ((X{T}[...]) -> (Y{T}[...]))
  "x * Phi(x), the exact erf form (torch's default)"
  (* 0.5 X (+ 1 (erf (* X 0.7071067811865476)))))
