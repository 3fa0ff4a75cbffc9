;;; Inverse trigonometry, built on the elementwise library.

(composite atan ((X{T}[...]) -> (Y{T}[...]))
  "arctangent: Cephes' reduction to |x| <= 0.66 (via pi/2 - atan(1/x) and pi/4 + atan((x-1)/(x+1))), then x + x z P(z)/Q(z); a zero keeps its sign"
  (let ((a (abs X))
        (big (< 2.414213562373095 a))
        (mid (and (not big) (< 0.66 a)))
        (xr (where big (neg (recip a)) (where mid (/ (- a 1) (+ a 1)) a)))
        (z (* xr xr))
        (q (/ (horner z -6.485021904942025371773e1 -1.228866684490136173410e2 -7.500855792314704667340e1
                        -1.615753718733365076637e1 -8.750608600031904122785e-1)
              (horner z 1.945506571482613964425e2 4.853903996359136964868e2 4.328810604912902668951e2
                        1.650270098316988542046e2 2.485846490142306297962e1 1))))
    (let ((t (+ (* xr (* z q)) xr)))
      (where (= X 0) X (* (sign X) (where big (+ t 1.5707963267948966) (where mid (+ t 0.7853981633974483) t)))))))
(composite asin ((X{T}[...]) -> (Y{T}[...]))
  "arcsine: atan(x / sqrt((1 - x)(1 + x))) (nan outside [-1, 1])"
  (atan (/ X (sqrt (* (- 1 X) (+ 1 X))))))
(composite acos ((X{T}[...]) -> (Y{T}[...]))
  "arccosine: 2 atan(sqrt((1 - x) / (1 + x))), accurate near 1 (nan outside [-1, 1])"
  (* 2 (atan (sqrt (/ (- 1 X) (+ 1 X))))))

;;; Hyperbolic functions and their inverses: f64 formulas free of cancellation and of premature
;;; overflow; narrower floats compute in f64 and round once. A zero keeps its sign.
(composite sinh ((X{T}[...]) -> (Y{T}[...]))
  "hyperbolic sine: (e + e/(e+1))/2 with e = expm1(|x|); e**(|x|/2)^2/2 past 709"
  :vjp ((dY) (* dY (cosh X)))
  (assert (float? X) "sinh takes floats (cast an integer tensor first, as caten.Tensor does)")
  (if (< (bits X) 64)
      (CAST (sinh (CAST X f64)) (dtype X))
      (let ((a (abs X))
            (e (expm1 a))
            (h (exp-f64 (* a 0.5)))
            (s (where (< a 709) (* 0.5 (+ e (/ e (+ e 1)))) (* (* h 0.5) h))))
        (where (= X 0) X (where (< X 0) (neg s) s)))))
(composite cosh ((X{T}[...]) -> (Y{T}[...]))
  "hyperbolic cosine: (e + 1/e)/2 with e = e**|x|; e**(|x|/2)^2/2 past 709"
  :vjp ((dY) (* dY (sinh X)))
  (assert (float? X) "cosh takes floats (cast an integer tensor first, as caten.Tensor does)")
  (if (< (bits X) 64)
      (CAST (cosh (CAST X f64)) (dtype X))
      (let ((a (abs X))
            (e (exp-f64 a))
            (h (exp-f64 (* a 0.5))))
        (where (< a 709) (* 0.5 (+ e (recip e))) (* (* h 0.5) h)))))
(composite asinh ((X{T}[...]) -> (Y{T}[...]))
  "inverse hyperbolic sine: log1p(a + a^2/(1 + sqrt(1 + a^2))), log(a) + ln 2 past 2**28"
  :vjp ((dY) (* dY (rsqrt (+ (* X X) 1))))
  (if (< (bits X) 64)
      (CAST (asinh (CAST X f64)) (dtype X))
      (let ((a (abs X))
            (s (where (< a 268435456.0)
                      (log1p (+ a (/ (* a a) (+ 1 (SQRT (+ 1 (* a a)))))))
                      (+ (log a) 0.6931471805599453))))
        (where (= X 0) X (where (< X 0) (neg s) s)))))
(composite acosh ((X{T}[...]) -> (Y{T}[...]))
  "inverse hyperbolic cosine: log1p(t + sqrt(2t + t^2)) with t = x - 1, log(x) + ln 2 past 2**28; nan below 1"
  :vjp ((dY) (* dY (rsqrt (- (* X X) 1))))
  (if (< (bits X) 64)
      (CAST (acosh (CAST X f64)) (dtype X))
      (let ((t (- X 1))
            (s (where (< X 268435456.0)
                      (log1p (+ t (SQRT (+ (* 2 t) (* t t)))))
                      (+ (log X) 0.6931471805599453))))
        (where (< X 1) nan s))))
(composite atanh ((X{T}[...]) -> (Y{T}[...]))
  "inverse hyperbolic tangent: log1p(2a / (1 - a)) / 2 (+-inf at +-1, nan beyond)"
  :vjp ((dY) (/ dY (- 1 (* X X))))
  (if (< (bits X) 64)
      (CAST (atanh (CAST X f64)) (dtype X))
      (let ((a (abs X))
            (s (* 0.5 (log1p (/ (* 2 a) (- 1 a))))))
        (where (= X 0) X (where (< X 0) (neg s) s)))))
