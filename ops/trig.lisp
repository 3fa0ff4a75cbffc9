;;; Inverse trigonometry, built on the elementwise library.

(composite atan ((X{T}[...]) -> (Y{T}[...]))
  "arctangent: Cephes' reduction to |x| <= 0.66 (via pi/2 - atan(1/x) and pi/4 + atan((x-1)/(x+1))), then x + x z P(z)/Q(z)"
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
      (* (sign X) (where big (+ t 1.5707963267948966) (where mid (+ t 0.7853981633974483) t))))))
(composite asin ((X{T}[...]) -> (Y{T}[...]))
  "arcsine: atan(x / sqrt((1 - x)(1 + x))) (nan outside [-1, 1])"
  (atan (/ X (sqrt (* (- 1 X) (+ 1 X))))))
(composite acos ((X{T}[...]) -> (Y{T}[...]))
  "arccosine: 2 atan(sqrt((1 - x) / (1 + x))), accurate near 1 (nan outside [-1, 1])"
  (* 2 (atan (sqrt (/ (- 1 X) (+ 1 X))))))
